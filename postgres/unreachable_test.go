package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
)

// TestUnreachable: Open against a server that is not there is an outage
// (serve retries it); a server that answers with a refusal, and errors the
// server decides, are not.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	_, err = postgres.Open(context.Background(), fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", closedPort), parley.Options{})
	if err == nil || !postgres.Unreachable(err) {
		t.Errorf("Open on a closed port: %v; want an error Unreachable reports", err)
	}
	if _, err := postgres.Open(context.Background(), "postgres://[bad", parley.Options{}); err == nil || postgres.Unreachable(err) {
		t.Errorf("Open on a DSN that does not parse: %v; want an error that is not Unreachable", err)
	}

	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"admin shutdown", fmt.Errorf("postgres: send: %w", &pgconn.PgError{Code: "57P01"}), true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"wrong password", &pgconn.PgError{Code: "28P01"}, false},
		{"missing database", &pgconn.PgError{Code: "3D000"}, false},
		{"syntax error", &pgconn.PgError{Code: "42601"}, false},
		{"deadline", fmt.Errorf("postgres: migrate: %w", context.DeadlineExceeded), true},
		{"a plain error", errors.New("migration 0009_x.sql: name must start with a number"), false},
	}
	for _, tt := range tests {
		if got := postgres.Unreachable(tt.err); got != tt.want {
			t.Errorf("%s: Unreachable(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}

	t.Run("missing database", func(t *testing.T) {
		u, err := url.Parse(pgtest.Server(t))
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/parley_no_such_database"
		if _, err := postgres.Open(context.Background(), u.String(), parley.Options{}); err == nil || postgres.Unreachable(err) {
			t.Errorf("Open on a missing database: %v; want an error that is not Unreachable (waiting cannot mend it)", err)
		}
	})
}
