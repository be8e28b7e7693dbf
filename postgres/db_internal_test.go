package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool exposes a store's connection pool to the black-box tests, which
// hold connections of it the way the store's own writes do.
func Pool(db *DB) *pgxpool.Pool { return db.pool }

// Write runs fn in one of the store's write transactions.
func Write(db *DB, ctx context.Context, fn func(tx pgx.Tx) error) error {
	return db.write(ctx, "test", fn)
}
