// kubectl-tenantroute is the kubectl plugin of the operator (kubectl tenantroute ...):
// put it on the PATH and kubectl finds it. See internal/kubectlplugin.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/tenantroute/tenantroute-operator/internal/kubectlplugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := kubectlplugin.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
