package providers

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func create(name string) Change {
	return Change{Action: Create, New: &Record{Name: name, Type: TypeA, TTL: 60, Values: []string{"192.0.2.1"}}}
}

func TestBatcherSplitsWithinLimitsAndKeepsNamesTogether(t *testing.T) {
	var changes []Change
	for i := range 10 {
		name := fmt.Sprintf("n%d.example.com", i)
		changes = append(changes, Change{Action: Delete, Old: &Record{Name: name, Type: TypeCNAME}}, create(name))
	}
	var batches [][]Change
	b := Batcher{
		Limit: Cost{Records: 5},
		Cost:  func(Change) Cost { return Cost{Records: 1} },
		Send: func(_ context.Context, batch []Change) ([]Change, error) {
			batches = append(batches, batch)
			return batch, nil
		},
	}
	res, err := b.Apply(context.Background(), changes)
	if err != nil || len(res.Applied) != 20 {
		t.Fatalf("applied %d, err %v", len(res.Applied), err)
	}
	if len(batches) != 5 {
		t.Errorf("%d batches, want 5 of two names each", len(batches))
	}
	// 5 records a batch and names kept whole: 20 changes do not fit in 4 batches.
	if n := b.Batches(changes); n != len(batches) {
		t.Errorf("Batches says %d, Apply sent %d", n, len(batches))
	}
	for _, batch := range batches {
		if len(batch) > 5 || len(batch)%2 != 0 || batch[0].Name() != batch[1].Name() || batch[0].Action != Delete {
			t.Errorf("batch splits a name or exceeds the limit: %d changes", len(batch))
		}
	}
}

func TestBatcherIsolatesRejectedChanges(t *testing.T) {
	var changes []Change
	for i := range 500 {
		changes = append(changes, create(fmt.Sprintf("r%03d.example.com", i)))
	}
	bad := map[string]bool{"r017.example.com": true, "r433.example.com": true}
	calls := 0
	b := Batcher{
		Limit: Cost{Records: 200},
		Cost:  func(Change) Cost { return Cost{Records: 1} },
		Send: func(_ context.Context, batch []Change) ([]Change, error) {
			calls++
			for _, c := range batch {
				if bad[c.Name()] {
					return nil, &RejectedError{Err: errors.New("invalid " + c.Name())}
				}
			}
			return batch, nil
		},
	}
	res, err := b.Apply(context.Background(), changes)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 498 || len(res.Failed) != 2 {
		t.Fatalf("applied %d, failed %d", len(res.Applied), len(res.Failed))
	}
	for _, f := range res.Failed {
		if !bad[f.Change.Name()] {
			t.Errorf("good change %s reported failed", f.Change.Name())
		}
	}
	// 3 batches, two of them bisected down to one change: about 2*log2(200) each.
	if calls > 3+2*2*8 {
		t.Errorf("%d calls to isolate 2 bad changes in 500", calls)
	}
}

func TestBatcherStopsOnTransientErrors(t *testing.T) {
	changes := []Change{create("a.example.com"), create("b.example.com")}
	outage := errors.New("503")
	b := Batcher{
		Limit: Cost{Records: 1},
		Cost:  func(Change) Cost { return Cost{Records: 1} },
		Send: func(_ context.Context, batch []Change) ([]Change, error) {
			if batch[0].Name() == "b.example.com" {
				return nil, outage
			}
			return batch, nil
		},
	}
	res, err := b.Apply(context.Background(), changes)
	if !errors.Is(err, outage) || len(res.Applied) != 1 || len(res.Failed) != 0 {
		t.Fatalf("applied %d, failed %d, err %v", len(res.Applied), len(res.Failed), err)
	}
}
