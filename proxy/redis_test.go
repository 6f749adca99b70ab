package proxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenantroute/tenantroute-operator/routes"
)

// redisServer runs Debian's redis-server on a free port; kill and start stop it and
// bring it back on the same port.
type redisServer struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is needed (apt-get install redis-server; .ci/run installs it): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	r := &redisServer{t: t, port: port}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

func (r *redisServer) start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", r.addr()); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatal("redis-server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *redisServer) kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// TestRedisOutageUnderLoad: with routes held in memory for only 50 ms, lookups go to
// Redis all the time; Redis is killed and restarted under load, and no request fails
// or reaches the wrong region.
func TestRedisOutageUnderLoad(t *testing.T) {
	redisSrv := startRedis(t)
	eu, _ := backend(t, "eu-west")
	us, _ := backend(t, "us-east")
	table := map[string]Route{}
	for i := range 20 {
		r := Route{Tenant: fmt.Sprintf("t%d", i), Region: "eu-west", Backends: []string{eu.URL}}
		if i%2 == 1 {
			r.Region, r.Backends = "us-east", []string{us.URL}
		}
		table[fmt.Sprintf("t%d.auth.example.com", i)] = r
	}
	kv := routes.KV{Client: routes.NewRedisClient(redisSrv.addr())}
	if err := kv.Put(context.Background(), table); err != nil {
		t.Fatal(err)
	}
	lookup := httptest.NewServer(routes.LookupHandler(&fakeLayer{name: "source", routes: table}, routes.Normalize))
	defer lookup.Close()

	chain := NewChain(ChainOptions{TTL: 50 * time.Millisecond, BreakerCooldown: 500 * time.Millisecond, Observe: ObserveLayer},
		kv, routes.HTTPSource{BaseURL: lookup.URL})
	p := New(chain, Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := p.newServer()
	go func() { _ = srv.Serve(p.Listener(ln)) }()
	defer func() { _ = srv.Shutdown() }()

	var ok, failed, misrouted atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for w := range 16 {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				host := fmt.Sprintf("t%d.auth.example.com", i%20)
				req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
				req.Host = host
				resp, err := client.Do(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("%s: %v %v", host, err, resp))
					if resp != nil {
						resp.Body.Close()
					}
					continue
				}
				resp.Body.Close()
				if resp.Header.Get("X-Backend") != table[host].Region {
					misrouted.Add(1)
				}
				ok.Add(1)
			}
		})
	}
	redisHits := func() float64 { return testutil.ToFloat64(lookups.WithLabelValues("redis", "hit")) }
	time.Sleep(time.Second)
	before := redisHits()
	redisSrv.kill()
	time.Sleep(2 * time.Second)
	redisSrv.start()
	if err := kv.Put(context.Background(), table); err != nil { // a new Redis is empty
		t.Fatal(err)
	}
	afterRestart := redisHits()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	t.Logf("%d requests, %d failed, %d misrouted; redis hits %.0f before the kill, %.0f after the restart",
		ok.Load()+failed.Load(), failed.Load(), misrouted.Load(), before, redisHits()-afterRestart)
	if failed.Load() != 0 {
		t.Errorf("%d requests failed while Redis was down, e.g. %v", failed.Load(), firstFailure.Load())
	}
	if misrouted.Load() != 0 {
		t.Errorf("%d requests reached another region", misrouted.Load())
	}
	if ok.Load() < 1000 {
		t.Errorf("only %d requests: the load was not sustained", ok.Load())
	}
	if before == 0 || redisHits() == afterRestart {
		t.Errorf("Redis was not used before the kill (%.0f hits) or after the restart", before)
	}
}
