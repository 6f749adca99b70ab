package zonequeue

import (
	"context"
	"fmt"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// summary is what makes two outcomes different for the controller: an error counts
// by its kind and code, not its text (which carries request ids), so that retries of
// one failure do not look like news.
func (o Outcome) summary() string {
	errKey := ""
	if o.Err != nil {
		errKey = fmt.Sprintf("%t:%s", providers.IsPermanent(o.Err), providers.ErrorCode(o.Err))
	}
	return fmt.Sprintf("%t/%d/%d/%d/%s", o.Synced, o.Records, len(o.Conflicts), len(o.Failed), errKey)
}

// finish records the outcomes, keeps owners with an error pending, marks owners that
// lost a name to a deletion of this flush (released) for another try, and notifies
// changes. counted says that each outcome's Records is known after the apply; only
// then is an owner left with nothing dropped.
func (q *Queue) finish(outcomes map[string]*Outcome, released map[string]bool, counted bool) {
	type note struct {
		owner   string
		outcome Outcome
	}
	var notes []note
	q.mu.Lock()
	for key, out := range outcomes {
		o, ok := q.owners[key]
		if !ok {
			continue
		}
		out.Synced = out.Err == nil && !o.dirty
		if out.Err != nil && out.Records == 0 {
			out.Records = int(o.records) // unknown during a failure: the last count stands
		}
		if out.Err != nil {
			// Retried by the next flush, after the backoff.
			q.markDirty(o)
		}
		changed := o.outcome().summary() != out.summary() || len(out.Applied) > 0
		if changed {
			notes = append(notes, note{key, *out})
		}
		o.setOutcome(*out)
		if counted && len(o.desired) == 0 && !o.dirty && out.Synced && out.Records == 0 && len(out.Conflicts) == 0 && len(out.Failed) == 0 {
			// Nothing wanted and nothing left: known again only if it wants records here,
			// and an empty desire till then is answered at once.
			delete(q.owners, key)
			delete(q.present, key)
		}
	}
	// Only a deletion can free a name that another owner waits for: without one, the
	// walk over every owner (each flush, thousands of owners) is skipped.
	for _, o := range q.owners {
		if len(released) == 0 {
			break
		}
		for _, c := range o.conflicts() {
			if released[c.Desired.Name] {
				q.markDirty(o)
				break
			}
		}
	}
	q.mu.Unlock()
	if q.notify != nil {
		for _, n := range notes {
			q.notify(n.owner, n.outcome)
		}
	}
}

// count sets how many record sets each owner of the flush holds after the apply, and
// reports whether that is known: only then may finish drop an owner left with
// nothing.
func (q *Queue) count(ctx context.Context, outcomes map[string]*Outcome, before *planner, applied []providers.Change, applyErr error) bool {
	if applyErr == nil {
		// Every change's answer is known: what each owner has now is what it had plus
		// what was applied, without listing (and re-sorting) the zone again.
		for key, out := range outcomes {
			out.Records = before.records(key)
		}
		for _, c := range applied {
			if c.Old != nil {
				if out, ok := outcomes[c.Old.Owner]; ok {
					out.Records--
				}
			}
			if c.New != nil {
				if out, ok := outcomes[c.New.Owner]; ok {
					out.Records++
				}
			}
		}
		return true
	}
	// A batch may have been applied with its answer lost: the zone, listed again, says
	// what is there.
	after, err := q.provider.ListRecords(ctx, q.zone)
	if err != nil {
		return false
	}
	for _, r := range after {
		if out, ok := outcomes[r.Owner]; ok {
			out.Records++
		}
	}
	return true
}
