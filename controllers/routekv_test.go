package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// startRedisKV starts a Redis and returns it with the shared cache on it, entries
// living an hour.
func startRedisKV(t *testing.T) (*testenv.Redis, routes.KV) {
	t.Helper()
	redisSrv := testenv.StartRedis(t)
	rc, err := routes.NewRedisClient(routes.RedisOptions{Addrs: []string{redisSrv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	return redisSrv, routes.KV{Client: rc, Key: []byte("test-hmac-key-0123456789abcdef0123456789"), TTL: time.Hour}
}

// commandLog records the commands a Redis client sends, pipelines included.
type commandLog struct {
	mu   sync.Mutex
	cmds []string
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(cmd)
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			l.add(c)
		}
		return next(ctx, cmds)
	}
}

func (l *commandLog) add(c redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cmds = append(l.cmds, strings.ToUpper(c.Name()))
}

// take returns the commands logged since the last take.
func (l *commandLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	cmds := l.cmds
	l.cmds = nil
	return cmds
}

// What the shared cache holds for a route follows its spec, its deletion and its
// claims, not the rest of its status: a failover, which rewrites every route's status,
// sends Redis nothing (it sent each route's entries again: a reconcile and three or
// four round trips a route), while a claim granted by status alone (a custom domain
// proven) still reaches Redis at once.
func TestRedisIsWrittenOnlyWhenARouteLeadsElsewhere(t *testing.T) {
	_, kv := startRedisKV(t)
	log := &commandLog{}
	kv.Client.AddHook(log)
	dnsSrv, err := testenv.StartDNS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dnsSrv.Close)
	o := newOperator(t, "kvwrites")
	o.kv, o.kvSync = &kv, time.Hour // the synchroniser runs once, at the start
	o.dns = dnsSrv.Addr
	o.start()
	const host, domain = "kvw.auth.example.com", "login.kvwrites-corp.test"
	o.create(o.route("acme", host, domain))
	eventually(t, 20*time.Second, func() error {
		if r, err := kv.Lookup(context.Background(), host); err != nil || r.Tenant != "acme" {
			return fmt.Errorf("%s in Redis: %+v %v", host, r, err)
		}
		return expectCondition(o.get("acme").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, "Ready")
	})
	time.Sleep(time.Second) // the start's synchronisation and the last reconciles are done
	log.take()

	// A failover: every condition and the active edge change, no claim does.
	o.cfUp.Store(false)
	eventually(t, 20*time.Second, func() error {
		tr := o.get("acme")
		if tr.Status.ActiveEdge != o.awsEdge {
			return fmt.Errorf("active edge %q", tr.Status.ActiveEdge)
		}
		return expectCondition(tr.Status.Conditions, v1.ConditionFailedOver, metav1.ConditionTrue, "FailedOver")
	})
	time.Sleep(2 * time.Second) // a reconcile the status change started would be done by now
	if cmds := log.take(); len(cmds) > 0 {
		t.Errorf("a failover that moved no hostname sent Redis %d commands: %v", len(cmds), cmds)
	}

	// A custom domain proven: granted by the status alone, routed through Redis at once.
	var challenge v1.CustomDomainStatus
	eventually(t, 10*time.Second, func() error {
		cds := o.get("acme").Status.CustomDomains
		if len(cds) != 1 || cds[0].ChallengeValue == "" {
			return fmt.Errorf("custom domains %+v", cds)
		}
		challenge = cds[0]
		return nil
	})
	dnsSrv.Set(domain, dns.TypeCNAME, challenge.CNAMETarget)
	dnsSrv.Set(challenge.ChallengeName, dns.TypeTXT, challenge.ChallengeValue)
	eventually(t, 10*time.Second, func() error {
		if r, err := kv.Lookup(context.Background(), domain); err != nil || r.Tenant != "acme" {
			return fmt.Errorf("%s in Redis: %+v %v", domain, r, err)
		}
		return nil
	})
	if cmds := log.take(); !slices.Contains(cmds, "SET") {
		t.Errorf("the proven domain reached Redis without a SET: %v", cmds)
	}
}
