package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/parleychat/parley"
)

// secretLock is the advisory lock key that serialises sealSecrets of one
// database ("parley.s" in ASCII).
const secretLock int64 = 0x7061726c65792e73

// secretTable is a table whose secret column a store seals
// (parley.Sealer): hooks keep text, export_signing_keys and push_keys bytes.
type secretTable struct {
	name  string
	label func(id string) string
	text  bool
}

var secretTables = []secretTable{
	{name: "hooks", label: parley.HookSecretLabel, text: true},
	{name: "export_signing_keys", label: parley.ExportKeyLabel},
	{name: "push_keys", label: parley.PushKeyLabel},
}

// sealSecrets checks the key against the database's check value and seals
// what is in clear or under an older key, all in one transaction, so a
// failure leaves the rows as they were (parley.Sealer's contract). Servers
// that start together take turns on an advisory lock: the second finds the
// check value the first wrote and nothing left to seal.
func (db *DB) sealSecrets(ctx context.Context) error {
	s := db.opts.Secrets
	err := inTx(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = 0`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, secretLock); err != nil {
			return err
		}
		var check []byte
		err := tx.QueryRow(ctx, `SELECT sealed FROM secret_check WHERE id = 1`).Scan(&check)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			check = nil
		case err != nil:
			return err
		}
		check, err = parley.OpenSecrets(s, check, func() error {
			for _, t := range secretTables {
				if err := resealTable(ctx, tx, s, t); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || check == nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO secret_check (id, sealed) VALUES (1, $1)
			ON CONFLICT (id) DO UPDATE SET sealed = excluded.sealed`, check)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: seal secrets: %w", err)
	}
	return nil
}

// resealTable seals t's rows that are in clear or sealed under an older
// key, locking them (FOR UPDATE) against a writer that has not seen the
// lock.
func resealTable(ctx context.Context, tx pgx.Tx, s parley.Sealer, t secretTable) error {
	type row struct {
		id     string
		stored []byte
	}
	var redo []row
	rows, err := tx.Query(ctx, `SELECT id, secret, sealed FROM `+t.name+` FOR UPDATE`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var (
			id     string
			b      []byte
			sealed bool
		)
		if err := rows.Scan(&id, &b, &sealed); err != nil {
			rows.Close()
			return err
		}
		if t.text {
			if b, err = parley.SecretBytes(string(b), sealed); err != nil {
				rows.Close()
				return fmt.Errorf("%s %s: %w", t.name, id, err)
			}
		}
		out, changed, err := parley.ResealSecret(s, t.label(id), b, sealed)
		if err != nil {
			rows.Close()
			return err
		}
		if changed {
			redo = append(redo, row{id, out})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range redo {
		var v any = r.stored
		if t.text {
			v = parley.SecretText(r.stored, true)
		}
		if _, err := tx.Exec(ctx, `UPDATE `+t.name+` SET secret = $1, sealed = true WHERE id = $2`, v, r.id); err != nil {
			return err
		}
	}
	return nil
}
