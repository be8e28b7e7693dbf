package main

import (
	"log/slog"
	"strings"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/nats"
	"github.com/parleychat/parley/postgres"
)

// busHelp is the usage of --bus.
const busHelp = "how gateways hear of each other's writes: empty (the default) is in process on SQLite and PostgreSQL LISTEN/NOTIFY on PostgreSQL; " +
	"'inprocess' (one gateway only), 'postgres' (LISTEN/NOTIFY), or nats://HOST:PORT[,nats://HOST:PORT...][?prefix=NAME] (core NATS: each gateway hears only the conversations and users it serves; PREFIX, default parley, starts every subject, so installs sharing a NATS server need their own; PostgreSQL store only)"

// checkBus validates --bus against the store kind, before anything opens.
// A SQLite store is one file of one host, served by one process, so a bus
// between processes has nothing to connect: NATS and LISTEN/NOTIFY are
// refused with it.
func checkBus(bus, kind string) error {
	switch {
	case bus == "" || bus == "inprocess":
		return nil
	case bus == "postgres":
		if kind != "postgres" {
			return usagef("--bus postgres: LISTEN/NOTIFY needs a PostgreSQL store (--dsn)")
		}
		return nil
	case strings.HasPrefix(bus, "nats://"):
		if kind != "postgres" {
			return usagef("--bus %s: a NATS bus joins the gateways of one PostgreSQL store; a SQLite store is served by one process, whose bus is in process", bus)
		}
		if _, err := nats.NewBus(bus, nats.Options{}); err != nil {
			return usagef("--bus: %v", err)
		}
		return nil
	}
	return usagef("--bus %q: want empty, inprocess, postgres or nats://HOST:PORT", bus)
}

// newBus returns the bus --bus names (checked by checkBus) for a store of
// kind at dsn; nil for a gateway alone in its process, which hands every
// notice to its own fan-out first (gateway.Hub.Publish): an in-process bus
// could only hand each one back to it, work for nothing, as the other
// buses' SkipOwn says.
func newBus(bus, kind, dsn string, log *slog.Logger) (parley.Bus, error) {
	switch {
	case strings.HasPrefix(bus, "nats://"):
		return nats.NewBus(bus, nats.Options{Logger: log, SkipOwn: true}) // as the PostgreSQL bus below
	case bus == "postgres" || bus == "" && kind == "postgres":
		// The hub hands its notices to its own fan-out before the bus
		// (gateway.Hub.Publish): hearing them back is work for nothing.
		return postgres.NewBus(dsn, postgres.BusOptions{Logger: log, SkipOwn: true})
	}
	return nil, nil
}
