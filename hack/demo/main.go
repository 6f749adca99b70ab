// Command demo holds the pieces of the local demo that are not the operator itself:
//
//	demo controlplane -dir D   run etcd and kube-apiserver (built under bin/k8s) and
//	                           write D/kubeconfig; stop on SIGTERM
//	demo servers ...           two edges' health endpoints and two regions' backends
//	demo freeports N           print N free local TCP ports
//	demo metrics URL...        fail unless every metric the shipped Grafana dashboard
//	                           and alert rules name is served by one of the URLs
//	demo pebble-config ...     write the local ACME server's (Pebble's) configuration
//	                           and API certificate; print the configuration's path
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/miekg/dns"

	"github.com/tenantroute/tenantroute-operator/internal/monitoring"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: demo controlplane|servers|freeports|metrics|pebble-config ...")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "controlplane":
		err = controlPlane(ctx, os.Args[2:])
	case "servers":
		err = servers(ctx, os.Args[2:])
	case "freeports":
		err = freePorts(os.Args[2:])
	case "metrics":
		err = checkMetrics(ctx, os.Args[2:])
	case "pebble-config":
		err = pebbleConfig(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		log.Fatal(err)
	}
}

func controlPlane(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("controlplane", flag.ExitOnError)
	dir := fs.String("dir", ".demo", "where to write the kubeconfig")
	_ = fs.Parse(args)
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}
	// A short stop timeout: the operator's open watches would otherwise hold
	// kube-apiserver's graceful stop for 20 s.
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStopTimeout: 5 * time.Second}
	if _, err := env.Start(); err != nil {
		return fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	defer func() { _ = env.Stop() }()
	user, err := env.AddUser(envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return err
	}
	path := filepath.Join(*dir, "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return err
	}
	log.Printf("kube-apiserver at %s; kubeconfig %s", env.Config.Host, path)
	<-ctx.Done()
	return nil
}

// servers runs the edges' health endpoints (GET /healthz; POST /down and /up switch
// them), the regions' backends (they answer with their region and what they got), and
// a tenant's own DNS server with an admin endpoint to create records in it.
func servers(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("servers", flag.ExitOnError)
	edges := map[string]*string{
		"cloudflare": fs.String("edge-cloudflare", "127.0.0.1:0", "health endpoint of the Cloudflare edge"),
		"aws":        fs.String("edge-aws", "127.0.0.1:0", "health endpoint of the AWS edge"),
	}
	regions := map[string]*string{
		"eu-west": fs.String("region-eu-west", "127.0.0.1:0", "backend of region eu-west"),
		"us-east": fs.String("region-us-east", "127.0.0.1:0", "backend of region us-east"),
	}
	dnsAddr := fs.String("dns", "127.0.0.1:0", "a tenant's own DNS (UDP), where custom domains are proven")
	dnsAdmin := fs.String("dns-admin", "127.0.0.1:0", "POST /records?name=&type=TXT|CNAME&value= sets a record of that DNS")
	_ = fs.Parse(args)
	tenantDNS, err := testenv.StartDNS(*dnsAddr)
	if err != nil {
		return err
	}
	defer tenantDNS.Close()
	var srvs []*http.Server
	admin := http.NewServeMux()
	admin.HandleFunc("POST /records", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		rrtype, ok := map[string]uint16{"TXT": dns.TypeTXT, "CNAME": dns.TypeCNAME}[q.Get("type")]
		if !ok || q.Get("name") == "" {
			http.Error(w, "name and type (TXT or CNAME) are needed", http.StatusBadRequest)
			return
		}
		var values []string
		if v := q.Get("value"); v != "" {
			values = []string{v}
		}
		tenantDNS.Set(q.Get("name"), rrtype, values...)
		fmt.Fprintf(w, "%s %s %v\n", q.Get("name"), q.Get("type"), values)
	})
	srvs = append(srvs, &http.Server{Addr: *dnsAdmin, Handler: admin, ReadHeaderTimeout: 5 * time.Second})
	for name, addr := range edges {
		var down atomic.Bool
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			if down.Load() {
				http.Error(w, name+" edge is down", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintf(w, "%s edge is up\n", name)
		})
		mux.HandleFunc("POST /down", func(w http.ResponseWriter, _ *http.Request) { down.Store(true); fmt.Fprintln(w, "down") })
		mux.HandleFunc("POST /up", func(w http.ResponseWriter, _ *http.Request) { down.Store(false); fmt.Fprintln(w, "up") })
		srvs = append(srvs, &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second})
	}
	for region, addr := range regions {
		srvs = append(srvs, &http.Server{Addr: *addr, ReadHeaderTimeout: 5 * time.Second,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]string{
					"region": region, "tenant": r.Header.Get("X-Tenant-ID"), "host": r.Host,
					"path": r.URL.Path, "forwardedFor": r.Header.Get("X-Forwarded-For"),
				})
			})})
	}
	errs := make(chan error, len(srvs))
	for _, s := range srvs {
		go func() { errs <- s.ListenAndServe() }()
	}
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
		for _, s := range srvs {
			_ = s.Close()
		}
		return nil
	}
}

func freePorts(args []string) error {
	n := 1
	if len(args) > 0 {
		if _, err := fmt.Sscan(args[0], &n); err != nil {
			return err
		}
	}
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		lns = append(lns, ln)
		fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return nil
}

// checkMetrics scrapes the running manager's and proxies' /metrics and fails if the
// dashboard or an alert names a metric none of them serves (a renamed metric would
// otherwise leave a panel empty and an alert silent for good).
func checkMetrics(ctx context.Context, urls []string) error {
	queries, err := monitoring.DashboardQueries(monitoring.DashboardPath)
	if err != nil {
		return err
	}
	rules, err := monitoring.RuleQueries(monitoring.RulesPath)
	if err != nil {
		return err
	}
	queries = append(queries, rules...)
	var bodies []io.Reader
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("scraping %s: %d %v", u, resp.StatusCode, err)
		}
		bodies = append(bodies, bytes.NewReader(b))
	}
	exposed, err := monitoring.Exposed(bodies...)
	if err != nil {
		return err
	}
	missing, err := monitoring.Missing(queries, exposed)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("metrics named by the dashboard or the alerts but not served:\n  %s", strings.Join(missing, "\n  "))
	}
	fmt.Printf("%d dashboard and alert queries: every metric they name is served\n", len(queries))
	return nil
}

// pebbleConfig writes Pebble's configuration: its ACME API and management API on the
// given addresses, validating on the proxy's plain and TLS ports.
func pebbleConfig(args []string) error {
	fs := flag.NewFlagSet("pebble-config", flag.ExitOnError)
	dir := fs.String("dir", "", "directory to write into")
	var o testenv.PebbleOptions
	fs.StringVar(&o.Listen, "listen", "", "ACME API address")
	fs.StringVar(&o.Management, "management", "", "management API address")
	fs.IntVar(&o.HTTPPort, "http-port", 0, "port HTTP-01 validations connect to (the proxy's plain listener)")
	fs.IntVar(&o.TLSPort, "tls-port", 0, "port TLS-ALPN-01 validations connect to (the proxy's TLS listener)")
	_ = fs.Parse(args)
	cfg, _, err := testenv.WritePebbleConfig(*dir, o)
	if err != nil {
		return err
	}
	fmt.Println(cfg)
	return nil
}
