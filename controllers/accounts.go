package controllers

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/zonequeue"
)

// Account is the live client of one EdgeProvider: its provider behind a shared zone
// cache, and one apply queue per resolved zone.
type Account struct {
	Edge string
	// Fingerprint identifies the spec and Secret the account was built from.
	Fingerprint string
	Provider    *providers.Cached

	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.RWMutex
	queues map[string]*zonequeue.Queue // by zone name; a zone not resolved yet has none
	// list is queues as a slice, replaced whole on each AddQueue: Accounts.holds reads
	// it for every clean answer of a settling route (100,000 in a sync), with no lock
	// to wait behind and nothing to copy.
	list atomic.Pointer[[]*zonequeue.Queue]
	// checked is when the provider last accepted the credentials (see checkDue).
	checked time.Time
}

// newAccount returns an account without queues, its credentials just accepted (its
// zones are resolved with them next).
func newAccount(edge, fingerprint string, p *providers.Cached) *Account {
	return &Account{Edge: edge, Fingerprint: fingerprint, Provider: p, queues: map[string]*zonequeue.Queue{}, checked: time.Now()}
}

// checkDue tells whether the credentials are due for a check, at most once per
// interval, and if so counts the check as done: an EdgeProvider is also reconciled
// when a zone's listing starts or stops failing, and each check is a request at the
// account's rate limit (Route53's 5 a second, shared with the zones' first listings).
func (a *Account) checkDue(interval time.Duration) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if time.Since(a.checked) < interval {
		return false
	}
	a.checked = time.Now()
	return true
}

// Queue returns the apply queue of a zone.
func (a *Account) Queue(zone string) (*zonequeue.Queue, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	q, ok := a.queues[zone]
	return q, ok
}

// Queues returns the apply queues by zone name.
func (a *Account) Queues() map[string]*zonequeue.Queue {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make(map[string]*zonequeue.Queue, len(a.queues))
	for k, v := range a.queues {
		out[k] = v
	}
	return out
}

// AddQueue adds a zone's queue, running it when the account is installed.
func (a *Account) AddQueue(zone string, q *zonequeue.Queue) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.queues[zone] = q
	list := make([]*zonequeue.Queue, 0, len(a.queues))
	for _, each := range a.queues {
		list = append(list, each)
	}
	a.list.Store(&list)
	if a.ctx != nil {
		go q.Run(a.ctx)
	}
}

// Accounts holds the Account of every EdgeProvider that is ready.
type Accounts struct {
	ctx context.Context
	// ready, if set, is called when an EdgeProvider's account is installed, so that the
	// TenantRoutes waiting for it are reconciled.
	ready func(edge string)

	// conflicts are the zones an EdgeProvider names that another one manages
	// (edge/zone -> the other's name): nothing there is this EdgeProvider's to wait for.
	conflicts sync.Map

	mu     sync.RWMutex
	byEdge map[string]*Account
	list   atomic.Pointer[[]*Account] // byEdge's values, replaced whole (see all)
	// records counts owned record sets per edge, zone and owner, and totals per edge, for
	// the gauge; failing holds the owners per edge whose last outcome did not apply.
	records map[string]map[zoneOwner]int
	totals  map[string]int
	failing map[string]map[zoneOwner]bool
	// tried are the EdgeProviders this process has tried to connect. Until it has, a
	// route waits for the account rather than reporting it missing: every start
	// reconciles routes before their EdgeProviders connect.
	tried map[string]bool
}

// newAccounts returns an empty registry; the queues of its accounts run until ctx is done.
func newAccounts(ctx context.Context) *Accounts {
	return &Accounts{ctx: ctx, byEdge: map[string]*Account{}, records: map[string]map[zoneOwner]int{}, totals: map[string]int{},
		failing: map[string]map[zoneOwner]bool{}, tried: map[string]bool{}}
}

// Tried tells whether this process has tried to connect the EdgeProvider.
func (a *Accounts) Tried(edge string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.tried[edge]
}

// markTried records a first attempt to connect an EdgeProvider. If it did not connect,
// the routes that were waiting for it are reconciled to say why (Set reconciles them
// when it did).
func (a *Accounts) markTried(edge string) {
	a.mu.Lock()
	first := !a.tried[edge]
	a.tried[edge] = true
	_, connected := a.byEdge[edge]
	a.mu.Unlock()
	if first && !connected && a.ready != nil {
		a.ready(edge)
	}
}

// Get returns the account of an EdgeProvider, or nil when it is not ready.
func (a *Accounts) Get(edge string) *Account {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.byEdge[edge]
}

// Set installs the account of an EdgeProvider, starting its queues and stopping the
// account it replaces.
func (a *Accounts) Set(acct *Account) {
	ctx, cancel := context.WithCancel(a.ctx)
	acct.mu.Lock()
	acct.ctx, acct.cancel = ctx, cancel
	for _, q := range acct.queues {
		go q.Run(ctx)
	}
	acct.mu.Unlock()
	a.mu.Lock()
	old := a.byEdge[acct.Edge]
	a.byEdge[acct.Edge] = acct
	a.relist()
	recordsManaged.WithLabelValues(acct.Edge).Set(float64(a.totals[acct.Edge]))
	recordsFailing.WithLabelValues(acct.Edge).Set(float64(len(a.failing[acct.Edge])))
	abandonedDeletions.WithLabelValues(acct.Edge)
	a.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	if a.ready != nil {
		a.ready(acct.Edge)
	}
}

// holds tells whether a queue of any account holds a desire of owner that is not in
// place yet and has met no error (zonequeue.Queue.Holds): that queue's answer is
// still to come.
func (a *Accounts) holds(owner string) bool {
	for _, acct := range a.all() {
		for _, q := range acct.queueList() {
			if q.Holds(owner) {
				return true
			}
		}
	}
	return false
}

// Remove stops and forgets the account of an EdgeProvider.
func (a *Accounts) Remove(edge string) {
	a.mu.Lock()
	old := a.byEdge[edge]
	delete(a.byEdge, edge)
	a.relist()
	delete(a.records, edge)
	delete(a.totals, edge)
	delete(a.failing, edge)
	a.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	recordsManaged.DeleteLabelValues(edge)
	recordsFailing.DeleteLabelValues(edge)
}

// zoneOwner keys an owner's count in one zone with the queue's own strings: a key built
// by concatenation was an allocation per outcome, and 200,000 kept at 100,000 routes.
type zoneOwner struct{ zone, owner string }

// countOutcome records how many record sets owner has in a zone of edge, and
// whether its last apply there failed, and updates the gauges.
func (a *Accounts) countOutcome(edge, zone, owner string, n int, failed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	counts, ok := a.records[edge]
	if !ok {
		counts = map[zoneOwner]int{}
		a.records[edge] = counts
	}
	key := zoneOwner{zone, owner}
	a.totals[edge] += n - counts[key]
	if n == 0 {
		delete(counts, key)
	} else {
		counts[key] = n
	}
	recordsManaged.WithLabelValues(edge).Set(float64(a.totals[edge]))
	failing, ok := a.failing[edge]
	if !ok {
		failing = map[zoneOwner]bool{}
		a.failing[edge] = failing
	}
	if failed {
		failing[key] = true
	} else {
		delete(failing, key)
	}
	recordsFailing.WithLabelValues(edge).Set(float64(len(failing)))
}

// expediteAll has every queue flush what is pending now.
func (a *Accounts) expediteAll() {
	for _, acct := range a.all() {
		for _, q := range acct.queueList() {
			q.Expedite()
		}
	}
}

// all are the accounts, read without the registry's lock: callers that go on to wait
// for a queue's lock must not hold it meanwhile, nor an account's (queueList). A
// queue holds its lock over loops of 100,000 owners, and a writer waiting for the
// registry (countOutcome, on every answer), or for an account (a zone resolving
// late), would stop every reconcile's Accounts.Get or Account.Queue behind it.
func (a *Accounts) all() []*Account {
	if p := a.list.Load(); p != nil {
		return *p
	}
	return nil
}

// zoneHolder returns the EdgeProvider, other than edge, whose account has a queue for
// the zone of this provider id, or "".
func (a *Accounts) zoneHolder(id, edge string) string {
	for _, acct := range a.all() {
		if acct.Edge == edge {
			continue
		}
		for _, q := range acct.queueList() {
			if q.Zone().ID == id {
				return acct.Edge
			}
		}
	}
	return ""
}

// conflict returns the EdgeProvider that manages the zone edge names, when it is
// another one (see EdgeProviderReconciler.connect), or "".
func (a *Accounts) conflict(edge, zone string) string {
	if v, ok := a.conflicts.Load(edge + "/" + zone); ok {
		return v.(string)
	}
	return ""
}

// relist replaces the slice all returns; a.mu is held for writing.
func (a *Accounts) relist() {
	list := make([]*Account, 0, len(a.byEdge))
	for _, acct := range a.byEdge {
		list = append(list, acct)
	}
	a.list.Store(&list)
}

// queueList are the account's queues, read without its lock (see Accounts.all).
func (a *Account) queueList() []*zonequeue.Queue {
	if p := a.list.Load(); p != nil {
		return *p
	}
	return nil
}
