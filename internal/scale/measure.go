package scale

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tenantroute/tenantroute-operator/desired"
	"github.com/tenantroute/tenantroute-operator/internal/harness"
	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/cloudflare"
	"github.com/tenantroute/tenantroute-operator/providers/route53"
)

// apiCounts are the API server's write requests by resource ("tenantroutes/status"),
// and its CPU seconds under cpuKey.
type apiCounts map[string]float64

// cpuKey holds the API server's process_cpu_seconds_total among the counts; no
// resource name has an underscore.
const cpuKey = "process_cpu_seconds_total"

// managerCPUKey holds the manager's CPU seconds, from /proc.
const managerCPUKey = "manager_cpu_seconds"

// apiWrites reads the API server's count of write requests by resource, and its CPU.
func (r *run) apiWrites(ctx context.Context) (apiCounts, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(r.w.Config.Host, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.api.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	counts := apiCounts{}
	for _, m := range families[cpuKey].GetMetric() {
		counts[cpuKey] = m.GetCounter().GetValue()
	}
	_, counts[managerCPUKey] = usage(r.mgr.PID())
	for _, m := range families["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY":
		default:
			continue
		}
		key := l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		counts[key] += m.GetCounter().GetValue()
	}
	return counts, nil
}

func (r *run) writesSince(ctx context.Context, before apiCounts) (Writes, error) {
	after, err := r.apiWrites(ctx)
	if err != nil {
		return Writes{}, err
	}
	var w Writes
	for key, n := range after {
		d := int(n - before[key])
		switch key {
		case cpuKey:
			w.APIServerCPU = n - before[key]
		case managerCPUKey:
			w.ManagerCPU = n - before[key]
		case "tenantroutes/status":
			w.StatusPatches += d
		case "tenantroutes":
			w.RouteWrites += d
		case "events":
			w.Events += d
		case "edgeproviders/status":
			w.EdgeStatus += d
		default:
			w.Other += d
		}
	}
	cf, r53 := r.w.CF.Counters(), r.w.R53.Counters()
	for _, n := range cf {
		w.CloudflareCalls += n
	}
	for _, n := range r53 {
		w.Route53Calls += n
	}
	w.ProviderWrites = cf["POST /zones/{id}/dns_records/batch"] + r53["POST /2013-04-01/hostedzone/{Id}/rrset"]
	w.CloudflareLists, w.Route53Lists = cf["GET /zones/{id}/dns_records"], r53["GET /2013-04-01/hostedzone/{Id}/rrset"]
	w.CloudflareThrottled, w.Route53Throttled = r.w.CF.Throttled(), r.w.R53.Throttled()
	for name, counters := range map[string]map[string]int{"cloudflare": cf, "route53": r53} {
		for e, n := range counters {
			if strings.HasSuffix(e, "/dns_records") || strings.HasSuffix(e, "/dns_records/batch") || strings.HasSuffix(e, "/rrset") {
				continue
			}
			if w.OtherCalls == nil {
				w.OtherCalls = map[string]int{}
			}
			w.OtherCalls[name+" "+e] += n
		}
	}
	return w, nil
}

// usage reads a process' peak resident memory (VmHWM) and its CPU time from /proc.
func usage(pid int) (peakMiB, cpuSeconds float64) {
	if pid == 0 {
		return 0, 0
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				peakMiB = kb / 1024
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command name (which may hold spaces): utime is the 14th
		// field of the line, stime the 15th, in clock ticks (100 per second on Linux).
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			f := strings.Fields(string(b)[i+2:])
			if len(f) > 12 {
				u, _ := strconv.ParseFloat(f[11], 64)
				s, _ := strconv.ParseFloat(f[12], 64)
				cpuSeconds = (u + s) / 100
			}
		}
	}
	return peakMiB, cpuSeconds
}

// minimumCalls is the fewest calls each provider can take to write every route's
// record: for the sync, the zones' lookups (one each at Cloudflare; one page of
// Route53's list, where the harness's zones sit together), a listing of each empty
// zone and the creates; for
// a failover, the updates to the AWS edge (the zones are known and cached). The
// changes are packed by the providers' own costs and limits, as their batchers pack
// them: Route53's by its 32,000 characters of values (an ownership record with each
// create, an UPSERT counting twice) as well as its 1,000 records.
func (r *run) minimumCalls(failover bool) (cloudflareCalls, route53Calls int) {
	type costs interface {
		BatchLimit() providers.Cost
		ChangeCost(providers.Change) providers.Cost
	}
	perZone := map[string][]providers.Change{}
	for _, n := range r.names {
		h := r.host(n)
		zone := strings.TrimPrefix(h, n+".")
		rec := providers.Record{Name: h, Type: providers.TypeCNAME, TTL: 60, Values: []string{h + ".cdn.cloudflare.net"},
			Owner: desired.OwnerKey("default", harness.RoutesNamespace, n)}
		c := providers.Change{Action: providers.Create, New: &rec}
		if failover {
			moved := rec
			moved.Values = []string{harness.AWSEdgeTarget}
			c = providers.Change{Action: providers.Update, Old: &rec, New: &moved}
		}
		perZone[zone] = append(perZone[zone], c)
	}
	count := func(p costs, lookups int) int {
		calls := 0
		if !failover {
			calls += lookups
		}
		for _, changes := range perZone {
			if !failover {
				calls++ // the zone's listing
			}
			calls += providers.Batcher{Limit: p.BatchLimit(), Cost: p.ChangeCost}.Batches(changes)
		}
		return calls
	}
	return count(cloudflare.New(cloudflare.Options{}), len(perZone)), count(&route53.Provider{}, 1)
}
