package controllers

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/clip"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// certStatus reports in each TenantRoute's status the certificate each of its
// granted hostnames is served with, from the records the proxies write: the proxies
// hold the certificates and may have no API access, the operator has it. Records
// change without any Kubernetes event, so they are read every Interval (pipelined,
// a thousand hostnames a round trip) and status is patched only where it changed.
type certStatus struct {
	Client   client.Client
	Book     routes.CertBook
	Recorder events.EventRecorder
	Interval time.Duration
	// limiter paces status patches (certStatusQPS) so that a first pass over every
	// route (all Pending when the feature is turned on) leaves the API budget to the
	// records and failovers.
	limiter *rate.Limiter
}

// certStatusQPS is the pace of certificate status patches.
const certStatusQPS = 20

// Start implements manager.Runnable.
func (s *certStatus) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("certificates")
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		if err := s.sync(ctx, time.Now()); err != nil && ctx.Err() == nil {
			log.Info("certificate status not updated; trying again at the next interval", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: one writer of status.
func (s *certStatus) NeedLeaderElection() bool { return true }

// certBatch is how many hostnames are read from the book in one round trip.
const certBatch = 1000

func (s *certStatus) sync(ctx context.Context, now time.Time) error {
	if s.limiter == nil {
		s.limiter = rate.NewLimiter(certStatusQPS, certStatusQPS)
	}
	// Every route is read, few change: the cache's objects are read in place and only
	// a route whose status is patched is copied (report).
	var list v1.TenantRouteList
	if err := s.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing TenantRoutes: %w", err)
	}
	counts := map[v1.CertificateState]int{}
	var failed []error
	var batch []*v1.TenantRoute
	var hosts []string
	flush := func() error {
		recs, err := s.Book.CertRecords(ctx, hosts)
		if err != nil {
			return fmt.Errorf("reading certificate records: %w", err)
		}
		for _, route := range batch {
			certs := certificatesOf(routes.Granted(route), recs, now)
			for _, c := range certs {
				counts[c.State]++
			}
			// One route's failed patch must not starve those after it.
			if err := s.report(ctx, route, certs); err != nil {
				failed = append(failed, err)
			}
		}
		batch, hosts = batch[:0], hosts[:0]
		return nil
	}
	for i := range list.Items {
		route := &list.Items[i]
		batch = append(batch, route)
		hosts = append(hosts, routes.Granted(route)...)
		if len(hosts) >= certBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	for _, state := range []v1.CertificateState{v1.CertificateIssued, v1.CertificatePending, v1.CertificateFailed} {
		certificates.WithLabelValues(string(state)).Set(float64(counts[state]))
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d certificate status patches failed, the first: %w", len(failed), failed[0])
	}
	return nil
}

// certificatesOf turns the proxies' records of hosts into status entries.
func certificatesOf(hosts []string, recs map[string]routes.CertRecord, now time.Time) []v1.HostnameCertificate {
	var out []v1.HostnameCertificate
	for _, h := range hosts {
		rec, ok := recs[h]
		c := v1.HostnameCertificate{Hostname: h, Issuer: rec.Issuer, Source: rec.Source}
		switch {
		case !ok:
			c.State, c.Message = v1.CertificatePending, "no certificate served yet; an on-demand one is obtained on the first HTTPS request"
		case rec.NotAfter.IsZero():
			c.State, c.Message = v1.CertificateFailed, clip.String(rec.Error, maxCertificateMessage)
		case !now.Before(rec.NotAfter):
			c.State, c.Message = v1.CertificateFailed, "the certificate served expired at "+rec.NotAfter.UTC().Format(time.RFC3339)
			if rec.Error != "" {
				c.Message = clip.String(c.Message+"; renewal failed: "+rec.Error, maxCertificateMessage)
			}
		default:
			c.State = v1.CertificateIssued
			if rec.Error != "" {
				c.Message = clip.String("renewal failed (the current certificate is still served): "+rec.Error, maxCertificateMessage)
			}
		}
		if !rec.NotAfter.IsZero() {
			c.NotAfter = &metav1.Time{Time: rec.NotAfter.UTC().Truncate(time.Second)}
		}
		out = append(out, c)
	}
	return out
}

// report patches route's certificates when they changed, with an event for what
// changed: issued, failed, renewal failed.
func (s *certStatus) report(ctx context.Context, route *v1.TenantRoute, certs []v1.HostnameCertificate) error {
	if equality.Semantic.DeepEqual(route.Status.Certificates, certs) {
		return nil
	}
	before := map[string]v1.HostnameCertificate{}
	for _, c := range route.Status.Certificates {
		before[c.Hostname] = c
	}
	if err := s.limiter.Wait(ctx); err != nil {
		return err
	}
	original := route
	route = route.DeepCopy()
	route.Status.Certificates = certs
	if err := client.IgnoreNotFound(s.Client.Status().Patch(ctx, route, client.MergeFrom(original))); err != nil {
		return fmt.Errorf("patching the certificates of %s/%s: %w", route.Namespace, route.Name, err)
	}
	for _, c := range certs {
		old := before[c.Hostname]
		switch {
		case c.State == v1.CertificateFailed && (old.State != v1.CertificateFailed || old.Message != c.Message):
			s.Recorder.Eventf(route, nil, corev1.EventTypeWarning, v1.ReasonCertificateFailed, "ObtainCertificate", "%s: %s", c.Hostname, c.Message)
		case c.State == v1.CertificateIssued && c.Message != "" && old.Message != c.Message:
			s.Recorder.Eventf(route, nil, corev1.EventTypeWarning, v1.ReasonCertificateRenewalFailed, "RenewCertificate", "%s: %s", c.Hostname, c.Message)
		case c.State == v1.CertificateIssued && (old.State != v1.CertificateIssued || !old.NotAfter.Equal(c.NotAfter)):
			s.Recorder.Eventf(route, nil, corev1.EventTypeNormal, v1.ReasonCertificateIssued, "ObtainCertificate",
				"%s: certificate from %s, valid until %s", c.Hostname, c.Issuer, c.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// maxCertificateMessage is the CRD's bound on a certificate's message. A cut inside a
// character was stored as U+FFFD, never equal to what the next sync computed: a patch
// and a CertificateFailed event every sync.
const maxCertificateMessage = 1024
