package controllers_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/controllers"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

// The API server refuses an events.k8s.io Event whose note passes 1 KiB, and the
// recorder only logs that: a Warning naming many zones, or quoting a provider's error,
// was lost whole. The note is clipped instead.
func TestALongEventNoteIsClippedNotLost(t *testing.T) {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: kubernetes.NewForConfigOrDie(cfg).EventsV1()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.StartRecordingToSink(ctx.Done())
	defer b.Shutdown()
	sink := controllers.NewEventSinkForTest(b.NewRecorder(testenv.Scheme(), "test"))
	ep := &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: "long-note"}}
	ep.SetGroupVersionKind(v1.GroupVersion.WithKind("EdgeProvider"))
	// The cut (1,020 bytes and the mark) falls inside a two-byte rune: the clipped note
	// must stay valid UTF-8, which the API server requires too.
	note := "zones that cannot be listed: " + strings.Repeat("é", 600)
	sink.Eventf(ep, nil, corev1.EventTypeWarning, v1.ReasonZoneUnreadable, v1.ConditionZonesReady, "%s", note)
	eventually(t, 10*time.Second, func() error {
		for _, e := range eventsFor(ep) {
			if e.Reason != v1.ReasonZoneUnreadable {
				continue
			}
			if len(e.Note) > 1024 || !utf8.ValidString(e.Note) || !strings.HasPrefix(note, strings.TrimSuffix(e.Note, " ...")) {
				t.Fatalf("the note as stored: %d bytes, valid UTF-8 %t: %q", len(e.Note), utf8.ValidString(e.Note), e.Note)
			}
			return nil
		}
		return errors.New("the event with a long note was not stored")
	})
}
