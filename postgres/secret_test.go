package postgres_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleychat/parley"
	"github.com/parleychat/parley/postgres"
	"github.com/parleychat/parley/postgres/pgtest"
	"github.com/parleychat/parley/secretkey"
)

// TestSecretsNotInHooksRow: with a key, the whole hooks row, as any SQL
// client with read access sees it, holds no trace of the webhook's secret,
// nor the export_signing_keys row the key.
func TestSecretsNotInHooksRow(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx := context.Background()
	ring, err := secretkey.New(bytes.Repeat([]byte{7}, secretkey.Size))
	if err != nil {
		t.Fatal(err)
	}
	db, err := postgres.Open(ctx, dsn, parley.Options{Secrets: ring})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, u := range []string{"ana", "bot"} {
		if _, err := db.CreateUser(ctx, parley.NewUser{ID: u}); err != nil {
			t.Fatal(err)
		}
	}
	ana := parley.Principal{User: "ana", DeviceID: "d1", InstallID: "i1"}
	if _, err := db.CreateConversation(ctx, ana, parley.NewConversation{ID: "c-ops", Kind: parley.KindGroup, Members: []string{"bot"}}); err != nil {
		t.Fatal(err)
	}
	h, err := db.CreateHook(ctx, parley.NewHook{Conv: "c-ops", Bot: "bot", CreatedBy: "root"})
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := db.ExportSigningKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var row string
	if err := conn.QueryRow(ctx, `SELECT hooks::text FROM hooks WHERE id = $1`, h.ID).Scan(&row); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(row, h.Secret) || !strings.Contains(row, h.ID) {
		t.Errorf("hooks row %s: holds the secret %s (or is not the hook's)", row, h.Secret)
	}
	var raw []byte
	if err := conn.QueryRow(ctx, `SELECT secret FROM export_signing_keys WHERE id = $1`, parley.ExportSigningKeyID).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, key) {
		t.Error("the export_signing_keys row holds the key")
	}
}
