package postgres

import "github.com/jackc/pgx/v5/pgxpool"

// Pool exposes a store's connection pool to the black-box tests, which
// hold connections of it the way the store's own writes do.
func Pool(db *DB) *pgxpool.Pool { return db.pool }
