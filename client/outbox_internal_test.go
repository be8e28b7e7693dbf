package client

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"
)

// TestOutboxMigratesVersion1: a file written by a client of version 1
// (sends and recalls only) opens as version 2 with its items, their ids
// and its AUTOINCREMENT counter kept, so pending items keep their order,
// no pruned item's id comes back, and the new kinds can be written; a file
// of a newer version is refused.
func TestOutboxMigratesVersion1(t *testing.T) {
	ctx := t.Context()
	file := filepath.Join(t.TempDir(), "v1.db")
	raw, err := sql.Open("sqlite", "file:"+file)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		schema,
		`INSERT INTO outbox (cmid, conv, kind, body, created_ms) VALUES ('a', 'c', 'send', 'pending send', 1)`,
		`INSERT INTO outbox (cmid, conv, kind, target, created_ms) VALUES ('b', 'c', 'recall', 3, 2)`,
		`INSERT INTO outbox (cmid, conv, kind, body, created_ms, done, ended_ms) VALUES ('z', 'c', 'send', 'pruned', 3, 1, 3)`,
		`DELETE FROM outbox WHERE cmid = 'z'`,
	} {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	raw.Close()

	for round := range 2 { // the second open finds version 2 and changes nothing
		o, err := openOutbox(ctx, file)
		if err != nil {
			t.Fatal(err)
		}
		var v int
		if err := o.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil || v != schemaVersion {
			t.Errorf("round %d: user_version = %d, %v; want %d", round, v, err, schemaVersion)
		}
		items, err := o.items(ctx, false, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := cmids(items); len(got) != 2+round || got[0] != "a" || got[1] != "b" ||
			items[0].ID != 1 || items[0].Body != "pending send" || items[1].ID != 2 || items[1].Target != 3 {
			t.Errorf("round %d: pending = %+v", round, items)
		}
		if round == 0 {
			it, err := o.add(ctx, Item{CMID: "e", Conv: "c", Kind: KindReact, Target: 3, Emoji: "👍", On: true, Created: time.UnixMilli(4)})
			if err != nil {
				t.Fatal(err)
			}
			if it.ID != 4 {
				t.Errorf("new item id = %d, want 4 (3 was taken by an item since pruned)", it.ID)
			}
		} else if it := items[2]; it.Kind != KindReact || it.Emoji != "👍" || !it.On || it.Target != 3 {
			t.Errorf("reaction item after reopen = %+v", it)
		}
		o.close()
	}

	raw, err = sql.Open("sqlite", "file:"+file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, `PRAGMA user_version = 3`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if o, err := openOutbox(ctx, file); err == nil {
		o.close()
		t.Error("a file of version 3 opened")
	}
}
