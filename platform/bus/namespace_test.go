package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/testkit/natstest"
)

func TestNamespaceNames(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ns                                                  bus.Namespace
		cell, stream, prefix, subject, dlqStream, dlqPrefix string
	}{
		{bus.Namespace{}, "default", "TICKETING", "ticketing.", "ticketing.order.created", "TICKETING_DLQ", "dlq.ticketing."},
		{bus.ForCell(""), "default", "TICKETING", "ticketing.", "ticketing.order.created", "TICKETING_DLQ", "dlq.ticketing."},
		{bus.ForCell("default"), "default", "TICKETING", "ticketing.", "ticketing.order.created", "TICKETING_DLQ", "dlq.ticketing."},
		{bus.ForCell("a"), "a", "TICKETING_A", "cells.a.ticketing.", "cells.a.ticketing.order.created", "TICKETING_DLQ_A", "cells.a.dlq.ticketing."},
		{bus.ForCell("eu-west_2"), "eu-west_2", "TICKETING_EU-WEST_2", "cells.eu-west_2.ticketing.", "cells.eu-west_2.ticketing.order.created", "TICKETING_DLQ_EU-WEST_2", "cells.eu-west_2.dlq.ticketing."},
	} {
		t.Run(tt.cell+"/"+tt.stream, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.cell, tt.ns.Cell())
			require.Equal(t, tt.stream, tt.ns.Stream())
			require.Equal(t, tt.prefix, tt.ns.SubjectPrefix())
			require.Equal(t, tt.subject, tt.ns.Subject("ticketing.order.created"))
			require.Equal(t, tt.dlqStream, tt.ns.DLQStream())
			require.Equal(t, tt.dlqPrefix, tt.ns.DLQSubjectPrefix())
		})
	}
	require.Equal(t, bus.Namespace{}, bus.ForCell("default"), "the default cell is the zero Namespace")
	require.NotEqual(t, bus.ForCell("a"), bus.ForCell("b"))
	require.Panics(t, func() { bus.ForCell("a.b") })
}

func TestValidCellName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		valid bool
	}{
		{"a", true},
		{"0", true},
		{"default", true},
		{"eu-west_2", true},
		{"abcdefghijklmnopqrstuvwxyz012345", true}, // 32
		{"dlqx", true},
		{"", false},
		{"abcdefghijklmnopqrstuvwxyz0123456", false}, // 33
		{"-a", false},
		{"_a", false},
		{"A", false},
		{"a.b", false},
		{"a*", false},
		{"a>", false},
		{"a b", false},
		{"é", false},
		{"dlq", false},   // stream TICKETING_DLQ is the default DLQ stream
		{"dlq_a", false}, // stream TICKETING_DLQ_A is cell a's DLQ stream
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.valid, bus.ValidCellName(tt.name))
		})
	}
}

// Cells share one JetStream without sharing events: each namespace's
// streams are provisioned side by side and hold only their own subjects.
func TestNamespacesProvisionSideBySide(t *testing.T) {
	t.Parallel()
	srv := natstest.New(t) // provisions the default namespace
	_, js := srv.Connect(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	a, b := bus.ForCell("a"), bus.ForCell("b")
	for _, ns := range []bus.Namespace{a, b, {}} {
		require.NoError(t, bus.Provision(ctx, js, bus.Config{Namespace: ns}))
	}

	for _, ns := range []bus.Namespace{a, b} {
		s, err := js.Stream(ctx, ns.Stream())
		require.NoError(t, err)
		require.Equal(t, []string{"cells." + ns.Cell() + ".ticketing.>"}, s.CachedInfo().Config.Subjects)
		d, err := js.Stream(ctx, ns.DLQStream())
		require.NoError(t, err)
		require.Equal(t, []string{"cells." + ns.Cell() + ".dlq.ticketing.>"}, d.CachedInfo().Config.Subjects)
	}

	ack, err := js.Publish(ctx, a.Subject("ticketing.order.created"), []byte("{}"))
	require.NoError(t, err)
	require.Equal(t, a.Stream(), ack.Stream)
	ack, err = js.Publish(ctx, a.DLQSubjectPrefix()+"test", []byte("{}"))
	require.NoError(t, err)
	require.Equal(t, a.DLQStream(), ack.Stream)

	msgs := func(name string) uint64 {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}
	require.Equal(t, uint64(1), msgs(a.Stream()))
	require.Equal(t, uint64(1), msgs(a.DLQStream()))
	for _, name := range []string{b.Stream(), b.DLQStream(), bus.Stream, bus.DLQStream} {
		require.Zero(t, msgs(name), name)
	}

	names := js.StreamNames(ctx)
	var got []string
	for n := range names.Name() {
		got = append(got, n)
	}
	require.NoError(t, names.Err())
	require.ElementsMatch(t, []string{"TICKETING", "TICKETING_DLQ", "TICKETING_A", "TICKETING_DLQ_A", "TICKETING_B", "TICKETING_DLQ_B"}, got)
}
