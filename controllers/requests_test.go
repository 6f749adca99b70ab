package controllers

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// A route's own news (its records landed, a failover moved it) is reconciled before
// the plans that a fan-out asks for (an EdgeProvider that became ready, whose watch
// maps to every route of the edge) and before empty answers; a route already waiting
// at low priority moves up when its own news comes.
func TestAFanOutWaitsBehindARoutesOwnNews(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	var reqs requests
	reqs.addLow(nsKey("asked-low-before-the-start"))
	if err := reqs.start(context.Background(), q); err != nil {
		t.Fatal(err)
	}

	fanOut := lowPriority(handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: nsKey("fanned-1")}, {NamespacedName: nsKey("fanned-2")}, {NamespacedName: nsKey("fanned-3")}}
	}))
	old := &v1.EdgeProvider{}
	old.ResourceVersion = "1"
	cur := old.DeepCopy()
	cur.ResourceVersion = "2"
	fanOut.Update(context.Background(), event.UpdateEvent{ObjectOld: old, ObjectNew: cur}, q)
	reqs.addLow(nsKey("empty-answer"))
	reqs.add(nsKey("records-landed"))
	reqs.add(nsKey("fanned-2")) // its records landed too

	expectOrder(t, q, "records-landed", "fanned-2", "asked-low-before-the-start", "fanned-1", "fanned-3", "empty-answer")
	if n := q.Len(); n != 0 {
		t.Fatalf("%d more reconciles queued", n)
	}
}

// A route whose records waited for an account (or a zone) is reconciled with the
// routes' own news once the account is ready, not behind the fan-out and the empty
// answers queued before: at the start of a sync those come by the thousand from the
// account that connected first, and the records for the second one starved behind
// them. A route awaiting another edge stays where it was.
func TestRoutesAwaitingAnAccountGoAheadOnceItIsReady(t *testing.T) {
	reqs, q := startedRequests(t)
	var waiting awaiting
	reqs.addLow(nsKey("empty-answer"))
	waiting.add("cloudflare", nsKey("records-for-cloudflare"))
	waiting.add("aws", nsKey("records-for-aws"))
	waiting.add("cloudflare", nsKey("records-for-cloudflare")) // reconciled twice meanwhile
	reqs.add(nsKey("records-landed"))
	waiting.release("cloudflare", reqs.add)
	waiting.release("cloudflare", reqs.add) // released once only

	expectOrder(t, q, "records-landed", "records-for-cloudflare", "empty-answer")
	if n := q.Len(); n != 0 {
		t.Fatalf("%d more reconciles queued, want none (records-for-aws awaits aws)", n)
	}
}

// The routes of the informer's initial listing are planned at the default priority,
// in the order listed, before news that came after them: until a route is planned it
// has no records in any queue and no news will come for it, and at For's low priority
// the last of 10,000 waited behind the news of all the others. Empty answers and
// fan-outs still wait.
func TestTheInitialListingIsPlannedBeforeLaterNews(t *testing.T) {
	reqs, q := startedRequests(t)
	reqs.addLow(nsKey("empty-answer"))
	forHandler := handler.WithLowPriorityWhenUnchanged(handler.EventHandler(&handler.EnqueueRequestForObject{}))
	first := firstPlanAtDefaultPriority()
	for _, name := range []string{"listed-1", "listed-2"} {
		tr := &v1.TenantRoute{}
		tr.Name, tr.Namespace = name, "ns"
		e := event.CreateEvent{Object: tr, IsInInitialList: true}
		forHandler.Create(context.Background(), e, q)
		first.Create(context.Background(), e, q)
	}
	reqs.add(nsKey("records-landed"))

	expectOrder(t, q, "listed-1", "listed-2", "records-landed", "empty-answer")
}

// startedRequests returns requests feeding a new priority queue.
func startedRequests(t *testing.T) (*requests, priorityqueue.PriorityQueue[reconcile.Request]) {
	t.Helper()
	q := priorityqueue.New[reconcile.Request]("test")
	t.Cleanup(q.ShutDown)
	reqs := &requests{}
	if err := reqs.start(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	return reqs, q
}

func nsKey(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: "ns", Name: name}
}

// expectOrder takes len(want) reconciles from q and fails unless they are want's names
// in order.
func expectOrder(t *testing.T, q priorityqueue.PriorityQueue[reconcile.Request], want ...string) {
	t.Helper()
	for i, name := range want {
		got, priority, _ := q.GetWithPriority()
		q.Done(got)
		if got.Name != name {
			t.Fatalf("reconcile %d is %s (priority %d), want %s; order wanted: %v", i+1, got.Name, priority, name, want)
		}
	}
}
