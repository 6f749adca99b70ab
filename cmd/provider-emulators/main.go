// Command provider-emulators serves the Cloudflare and Route53 API emulators on local
// ports, for the local demo and for trying the operator without accounts.
//
// Each emulator also serves /__admin/faults (GET, PUT JSON {"outage", "errorRate",
// "latency", "tooManyRequests", "retryAfter"}), /__admin/counters (GET, DELETE),
// /__admin/zones (POST) and /__admin/records (GET).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	cfemulator "github.com/tenantroute/tenantroute-operator/providers/cloudflare/emulator"
	r53emulator "github.com/tenantroute/tenantroute-operator/providers/route53/emulator"
)

func main() {
	var (
		cfAddr     = flag.String("cloudflare-listen", "127.0.0.1:8787", "Address of the Cloudflare API emulator; its base URL is http://<address>/client/v4/.")
		r53Addr    = flag.String("route53-listen", "127.0.0.1:8788", "Address of the Route53 API emulator (the SDK endpoint).")
		cfToken    = flag.String("cloudflare-token", "emulator-token", "API token the Cloudflare emulator accepts.")
		awsKeyID   = flag.String("aws-access-key-id", "AKIAEMULATOR", "Access key id the Route53 emulator accepts.")
		awsSecret  = flag.String("aws-secret-access-key", "emulator-secret", "Secret access key the Route53 emulator accepts.")
		zones      = flag.String("zones", "auth.example.com", "Comma-separated zones created in both emulators.")
		rateLimits = flag.Bool("rate-limits", true, "Enforce the providers' real rate limits.")
	)
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	cf := cfemulator.New(*cfToken)
	r53 := r53emulator.New(*awsKeyID, *awsSecret)
	if !*rateLimits {
		cf.SetRateLimit(0, 0)
		r53.SetRateLimit(0, 0)
	}
	for _, z := range strings.Split(*zones, ",") {
		if z = strings.TrimSpace(z); z != "" {
			fmt.Printf("zone %s cloudflare-id %s route53-id %s\n", z, cf.AddZone(z), r53.AddZone(z))
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	servers := []*http.Server{
		{Addr: *cfAddr, Handler: cf, ReadHeaderTimeout: 10 * time.Second},
		{Addr: *r53Addr, Handler: r53, ReadHeaderTimeout: 10 * time.Second},
	}
	errs := make(chan error, len(servers))
	for _, s := range servers {
		go func() {
			log.Info("serving", "address", s.Addr)
			if err := s.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		}()
	}
	select {
	case err := <-errs:
		log.Error("emulator stopped", "error", err)
		os.Exit(1)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(shutdown)
	}
}
