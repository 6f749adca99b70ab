package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/harness"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// checker samples, for each moved hostname, the tenant each provider's records and
// each proxy lead to.
type checker struct {
	w       *harness.World
	hosts   []string
	proxies []string
	client  *http.Client

	mu                                  sync.Mutex
	samples                             int
	splitDNS, splitProxy, both, unsaved int
	asked, unanswered                   int64
	examples                            []string
}

func (c *checker) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		c.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// grantsWait bounds one read of the grants (20 routes: milliseconds when the API
// server can answer).
const grantsWait = 2 * time.Second

// grantsOf maps each hostname to the routes whose saved status grants it (a name a
// route releases included: its records are still in DNS), and counts the routes that
// list each.
func grantsOf(ctx context.Context, w *harness.World) (grants map[string][]string, listed map[string]int, err error) {
	ctx, cancel := context.WithTimeout(ctx, grantsWait)
	defer cancel()
	var list v1.TenantRouteList
	if err := w.Client.List(ctx, &list, client.InNamespace(harness.RoutesNamespace), client.HasLabels{movedLabel}); err != nil {
		return nil, nil, err
	}
	out := map[string][]string{}
	listed = map[string]int{}
	for i := range list.Items {
		tr := &list.Items[i]
		for _, h := range tr.Spec.Hostnames {
			listed[h]++
		}
		if tr.Status.TenantID == nil || tr.Status.TenantID.State != v1.ClaimGranted {
			continue
		}
		for _, c := range tr.Status.Hostnames {
			if c.State == v1.ClaimGranted {
				out[c.Hostname] = append(out[c.Hostname], tr.Name)
			}
		}
	}
	return out, listed, nil
}

func (c *checker) sample(ctx context.Context) {
	// The saved grants are read before and after the records: a record is declared
	// only after its grant is saved, and a grant is let go only after its records are
	// gone, so a record's owner holds a saved grant in one of the two reads unless it
	// was used without being saved. Only contested grants are saved before they are
	// used (docs/operating.md, Conflicts): a name only one route lists may lead to it
	// before its status says so.
	// While the API server is down the grants cannot be read; what DNS and the
	// proxies say is still compared. While etcd is down the API server holds a read
	// until its own timeout, so each read gets grantsWait: DNS and the proxies are
	// still sampled through an etcd outage instead of once at its end.
	before, listedBefore, errBefore := grantsOf(ctx, c.w)
	cf, r53 := dnsOwners(c.w)
	// A few keep-alive connections per proxy: a burst of one per hostname would meet
	// the proxy's connection limit per client address (429).
	answers := make([][]string, len(c.proxies))
	var wg sync.WaitGroup
	var unanswered atomic.Int64
	for p, addr := range c.proxies {
		answers[p] = make([]string, len(c.hosts))
		work := make(chan int)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					a, ok := c.ask(ctx, addr, c.hosts[i])
					answers[p][i] = a
					if !ok {
						unanswered.Add(1)
					}
				}
			}()
		}
		go func() {
			defer close(work)
			for i := range c.hosts {
				work <- i
			}
		}()
	}
	wg.Wait()
	after, listedAfter, errAfter := grantsOf(ctx, c.w)
	if ctx.Err() != nil {
		return
	}
	grantsRead := errBefore == nil && errAfter == nil
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples++
	c.asked += int64(len(c.proxies) * len(c.hosts))
	c.unanswered += unanswered.Load()
	for i, h := range c.hosts {
		dns := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(cf[h]), r53[h]...))))
		var proxied []string
		for p := range c.proxies {
			if a := answers[p][i]; a != "" {
				proxied = append(proxied, a)
			}
		}
		proxied = slices.Compact(slices.Sorted(slices.Values(proxied)))
		all := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(dns), proxied...))))
		contested := listedBefore[h] > 1 || listedAfter[h] > 1
		ungranted := grantsRead && contested && slices.ContainsFunc(dns, func(owner string) bool {
			return !slices.Contains(before[h], owner) && !slices.Contains(after[h], owner)
		})
		var what string
		switch {
		case ungranted:
			c.unsaved++
			what = "DNS, by a grant never saved,"
		case len(dns) > 1:
			c.splitDNS++
			what = "DNS"
		case len(proxied) > 1:
			c.splitProxy++
			what = "proxies"
		case len(all) > 1:
			c.both++
			what = "DNS and a proxy"
		default:
			continue
		}
		if len(c.examples) < 5 {
			c.examples = append(c.examples, fmt.Sprintf("%s: %s lead to %v (cloudflare %v, route53 %v, proxies %v)",
				time.Now().Format("15:04:05.000"), what, all, cf[h], r53[h], answers[0][i]+"/"+answers[1][i]))
		}
	}
}

// ask returns the tenant a proxy sends host to, "" when it routes it nowhere; ok is
// false when the proxy did not say (down, restarting, refusing the connection).
func (c *checker) ask(ctx context.Context, addr, host string) (tenant string, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return "", false
	}
	req.Host = host
	resp, err := c.client.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	switch resp.StatusCode {
	case http.StatusOK:
		return string(body), true
	case http.StatusNotFound, http.StatusMisdirectedRequest:
		return "", true
	}
	return "", false
}

func (c *checker) result(rep *ScenarioReport) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rep.Samples, rep.SplitDNS, rep.SplitProxy, rep.SplitDNSProxy, rep.Unsaved, rep.Examples =
		c.samples, c.splitDNS, c.splitProxy, c.both, c.unsaved, c.examples
	rep.ProxyAsked, rep.ProxyUnanswered = c.asked, c.unanswered
}

// dnsOwners maps each hostname with records to the routes owning them, per provider.
func dnsOwners(hw *harness.World) (cf, r53 map[string][]string) {
	cf, r53 = map[string][]string{}, map[string][]string{}
	for _, r := range hw.CF.Records(hw.CFZones[zoneName]) {
		if owner := ownerName(r.Comment); owner != "" {
			cf[strings.ToLower(r.Name)] = append(cf[strings.ToLower(r.Name)], owner)
		}
	}
	for _, rs := range hw.R53.RecordSets(hw.R53Zones[zoneName]) {
		if rs.Type != "TXT" || !strings.HasPrefix(rs.Name, "_tenantroute-") {
			continue
		}
		_, name, _ := strings.Cut(strings.TrimSuffix(strings.ToLower(rs.Name), "."), ".")
		for _, v := range rs.Values {
			if owner := ownerName(v); owner != "" {
				r53[name] = append(r53[name], owner)
			}
		}
	}
	return cf, r53
}

// ownerName is the route named in an ownership marker: "tenantroute:<instance>/<ns>/<name>"
// (Cloudflare's comment) or "heritage=tenantroute,owner=<instance>/<ns>/<name>" (the
// Route53 registry record, quoted).
func ownerName(marker string) string {
	marker = strings.Trim(marker, `"`)
	if _, owner, ok := strings.Cut(marker, "owner="); ok {
		marker = owner
	} else if owner, ok := strings.CutPrefix(marker, "tenantroute:"); ok {
		marker = owner
	} else {
		return ""
	}
	return marker[strings.LastIndexByte(marker, '/')+1:]
}
