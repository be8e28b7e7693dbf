package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/parleychat/parley"
)

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
// what is in clear or under an older key, all in one write transaction, so
// a failure leaves the rows as they were (parley.Sealer's contract). The
// writer lock (BEGIN IMMEDIATE) makes a second process opening the file
// wait, then find the work done.
func (db *DB) sealSecrets(ctx context.Context) error {
	s := db.opts.Secrets
	return db.write(ctx, "seal secrets", func(tx *txn) error {
		var check []byte
		err := tx.QueryRowContext(ctx, `SELECT sealed FROM secret_check WHERE id = 1`).Scan(&check)
		switch {
		case errors.Is(err, sql.ErrNoRows):
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
		_, err = tx.ExecContext(ctx, `INSERT INTO secret_check (id, sealed) VALUES (1, ?)
			ON CONFLICT (id) DO UPDATE SET sealed = excluded.sealed`, check)
		return err
	})
}

// resealTable seals t's rows that are in clear or sealed under an older key.
func resealTable(ctx context.Context, tx *txn, s parley.Sealer, t secretTable) error {
	type row struct {
		id     string
		stored []byte
	}
	var redo []row
	rows, err := tx.QueryContext(ctx, `SELECT id, secret, sealed FROM `+t.name)
	if err != nil {
		return err
	}
	for rows.Next() {
		var (
			id, secret string
			sealed     bool
		)
		if err := rows.Scan(&id, &secret, &sealed); err != nil {
			rows.Close()
			return err
		}
		b := []byte(secret)
		if t.text {
			if b, err = parley.SecretBytes(secret, sealed); err != nil {
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
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	for _, r := range redo {
		var v any = r.stored
		if t.text {
			v = parley.SecretText(r.stored, true)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+t.name+` SET secret = ?, sealed = 1 WHERE id = ?`, v, r.id); err != nil {
			return err
		}
	}
	return nil
}
