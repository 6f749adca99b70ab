//go:build !linux

package proxy

import (
	"context"
	"errors"
	"net"

	"github.com/valyala/fasthttp"
)

// DefaultEngine is the engine cmd/ serves the plain listener with unless told
// otherwise: fasthttp's, since the loop engine runs on Linux only.
const DefaultEngine = EngineFasthttp

type loopEngine struct{}

func startLoopEngine(*Proxy, *fasthttp.Server, net.Listener, *handoffListener) (*loopEngine, error) {
	return nil, errors.New("the loop engine runs on Linux only")
}

func (*loopEngine) stopAccepting()       {}
func (*loopEngine) wait(context.Context) {}
