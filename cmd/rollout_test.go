package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tenantroute/tenantroute-operator/routes"
)

// TestMain lets a test run this command as its own process: the test binary, started
// again with TENANTROUTE_RUN_MAIN=1, is the manager (main) with the arguments it is
// given, so that a test can send it SIGTERM.
func TestMain(m *testing.M) {
	if os.Getenv("TENANTROUTE_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const rolloutHost = "app.example.com"

// download is what /download sends, paced, so that a restart finds it in flight.
var download = bytes.Repeat([]byte("0123456789abcdef"), 128<<10) // 2 MiB

// rolloutBackend serves what real applications behind the proxy serve: short
// answers, a paced download, a Server-Sent Events stream that ends, and a WebSocket
// echo.
func rolloutBackend(t *testing.T) *httptest.Server {
	upgrader := websocket.Upgrader{}
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/download", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(download)))
		for off := 0; off < len(download); off += 64 << 10 {
			if _, err := w.Write(download[off:min(off+64<<10, len(download))]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(60 * time.Millisecond) // about 2 s in all
		}
	})
	mux.HandleFunc("/sse", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 20 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
		fmt.Fprint(w, "event: end\ndata: 20\n\n")
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			typ, msg, err := c.ReadMessage()
			if err != nil {
				return // a close frame is answered by the library
			}
			if err := c.WriteMessage(typ, msg); err != nil {
				return
			}
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

type staticRoutes map[string]routes.Route

func (s staticRoutes) Lookup(_ context.Context, host string) (routes.Route, error) {
	if r, ok := s[host]; ok {
		return r, nil
	}
	return routes.Route{}, routes.ErrNotFound
}

// proxyProcess is one proxy of the fleet, run as its own process.
type proxyProcess struct {
	t           *testing.T
	args        []string
	addr, probe string
	cmd         *exec.Cmd
	exited      chan error
	transport   *http.Transport
	stdout      *bytes.Buffer
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (p *proxyProcess) start() {
	p.t.Helper()
	p.cmd = exec.Command(os.Args[0], p.args...)
	p.cmd.Env = append(os.Environ(), "TENANTROUTE_RUN_MAIN=1")
	p.stdout = &bytes.Buffer{}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stdout
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan error, 1)
	go func() { p.exited <- p.cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for !p.ready() {
		if time.Now().After(deadline) {
			p.t.Fatalf("proxy on %s not ready: %s", p.addr, p.stdout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *proxyProcess) ready() bool {
	resp, err := http.Get("http://" + p.probe + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stop sends SIGTERM and waits for the process to exit, which must be with status 0.
func (p *proxyProcess) stop() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			p.t.Errorf("proxy on %s exited with %v: %s", p.addr, err, p.stdout)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		p.t.Fatalf("proxy on %s did not exit after SIGTERM", p.addr)
	}
}

// fleet is what a load balancer does with the proxies: it sends each request to the
// next ready one, and learns readiness from the probes every 100 ms, as endpoints
// follow a readiness probe.
type fleet struct {
	proxies []*proxyProcess
	ready   []atomic.Bool
	next    atomic.Uint64
}

func (f *fleet) watch(ctx context.Context) {
	for ctx.Err() == nil {
		for i, p := range f.proxies {
			f.ready[i].Store(p.ready())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pick returns a ready proxy, waiting for one.
func (f *fleet) pick() *proxyProcess {
	for {
		for range f.proxies {
			i := int(f.next.Add(1) % uint64(len(f.proxies)))
			if f.ready[i].Load() {
				return f.proxies[i]
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fleet) get(path string) (*http.Response, error) {
	p := f.pick()
	req, _ := http.NewRequest(http.MethodGet, "http://"+p.addr+path, nil)
	req.Host = rolloutHost
	return (&http.Client{Transport: p.transport, Timeout: 30 * time.Second}).Do(req)
}

// TestRollingRestartLosesNothing restarts the two proxies of a fleet one after the
// other under load, as a Deployment's rollout does (SIGTERM, then a new process),
// while clients keep short requests on kept-alive connections, paced downloads,
// Server-Sent Events streams and a WebSocket going through whichever proxy is ready:
// no request fails, no body is cut short, and the WebSocket is closed cleanly (1001,
// going away) by the proxy that drains, then reopened through the other.
func TestRollingRestartLosesNothing(t *testing.T) {
	backend := rolloutBackend(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("rollout-lookup-token-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	lookup := httptest.NewServer(routes.LookupHandler(staticRoutes{rolloutHost: {Tenant: "app", Region: "eu", Backends: []string{backend.URL}}},
		[]byte("rollout-lookup-token-0123456789"), routes.Normalize))
	t.Cleanup(lookup.Close)

	f := &fleet{}
	for range 2 {
		p := &proxyProcess{t: t, addr: freeAddr(t), probe: freeAddr(t),
			transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute}}
		p.args = []string{"--mode=proxy", "--proxy-bind-address=" + p.addr, "--health-probe-bind-address=" + p.probe,
			"--metrics-bind-address=0", "--lookup-url=" + lookup.URL, "--lookup-token-file=" + tokenFile,
			"--shutdown-delay=2s", "--shutdown-timeout=15s"}
		if engine := os.Getenv("TENANTROUTE_PROXY_ENGINE"); engine != "" {
			p.args = append(p.args, "--proxy-engine="+engine) // make test runs it with each engine
		}
		p.start()
		t.Cleanup(func() { _ = p.cmd.Process.Kill() })
		f.proxies = append(f.proxies, p)
	}
	f.ready = make([]atomic.Bool, len(f.proxies))
	for i := range f.ready {
		f.ready[i].Store(true)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go f.watch(ctx)

	var failures []string
	var mu sync.Mutex
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	var small, downloads, streams, wsMessages, wsCleanCloses atomic.Int64
	var wg sync.WaitGroup
	loop := func(work func()) {
		wg.Go(func() {
			for ctx.Err() == nil {
				work()
			}
		})
	}
	for range 6 {
		loop(func() {
			resp, err := f.get("/small")
			if err != nil {
				fail("GET /small: %v", err)
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || string(b) != "ok" {
				fail("GET /small: %d %q %v", resp.StatusCode, b, err)
				return
			}
			small.Add(1)
		})
	}
	want := sha256.Sum256(download)
	for range 2 {
		loop(func() {
			resp, err := f.get("/download")
			if err != nil {
				fail("GET /download: %v", err)
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || sha256.Sum256(b) != want {
				fail("GET /download: %d, %d of %d bytes, %v", resp.StatusCode, len(b), len(download), err)
				return
			}
			downloads.Add(1)
		})
		loop(func() {
			resp, err := f.get("/sse")
			if err != nil {
				fail("GET /sse: %v", err)
				return
			}
			defer resp.Body.Close()
			events, ended := 0, false
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				switch line := sc.Text(); {
				case line == "event: end":
					ended = true
				case strings.HasPrefix(line, "data: "):
					events++
				}
			}
			if !ended || events != 21 {
				fail("GET /sse: %d events, end %t, %v", events, ended, sc.Err())
				return
			}
			streams.Add(1)
		})
	}
	loop(func() {
		p := f.pick()
		d := websocket.Dialer{NetDialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, p.addr)
		}}
		c, _, err := d.Dial("ws://"+rolloutHost+"/ws", nil)
		if err != nil {
			fail("WebSocket through %s: %v", p.addr, err)
			return
		}
		defer c.Close()
		for i := 0; ctx.Err() == nil; i++ {
			msg := []byte(strconv.Itoa(i))
			if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
				fail("WebSocket write through %s: %v", p.addr, err)
				return
			}
			_, got, err := c.ReadMessage()
			if websocket.IsCloseError(err, websocket.CloseGoingAway) {
				wsCleanCloses.Add(1)
				return // the proxy drains: open another through a ready one
			}
			if err != nil || !bytes.Equal(got, msg) {
				fail("WebSocket read through %s: %q, %v", p.addr, got, err)
				return
			}
			wsMessages.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
	})

	time.Sleep(2 * time.Second)
	for _, p := range f.proxies {
		p.stop()
		p.start()
		time.Sleep(2 * time.Second)
	}
	stop()
	wg.Wait()
	t.Logf("through two rolling restarts: %d short requests, %d downloads, %d SSE streams, %d WebSocket messages, %d WebSocket clean closes",
		small.Load(), downloads.Load(), streams.Load(), wsMessages.Load(), wsCleanCloses.Load())
	for _, f := range failures {
		t.Error(f)
	}
	if small.Load() == 0 || downloads.Load() == 0 || streams.Load() == 0 || wsMessages.Load() == 0 {
		t.Error("some kind of traffic never went through")
	}
	if wsCleanCloses.Load() == 0 {
		t.Error("the WebSocket was never closed by a draining proxy")
	}
}
