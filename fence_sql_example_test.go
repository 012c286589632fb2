package redisync_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/redisync/redisync"
)

// saveReport writes a report only if no newer holder of the lock has: the
// row keeps the fencing token of its last write,
//
//	CREATE TABLE reports (id bigint PRIMARY KEY, body text, fence bigint NOT NULL DEFAULT 0)
//
// and an UPDATE carrying an older token changes nothing. "fence <= $2" lets
// one holder write several times; use "fence < $2" for one write per
// holder. Tokens fit a bigint (they count up from the server's clock in
// microseconds). The placeholders are PostgreSQL's; other drivers spell
// them "?".
func saveReport(ctx context.Context, db *sql.DB, l *redisync.Lease, id int64, body string) error {
	res, err := db.ExecContext(ctx,
		`UPDATE reports SET body = $1, fence = $2 WHERE id = $3 AND fence <= $2`,
		body, int64(l.Token()), id)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return fmt.Errorf("report %d: %w", id, redisync.ErrStaleToken)
	}
	return nil
}

// The fencing check at an SQL database: the UPDATE of saveReport only
// applies while no newer token has written the row. (Not run here: it
// needs a database and its driver.)
func Example_fencedSQL() {
	db, err := sql.Open("postgres", "postgres://localhost/app") // with a driver such as github.com/lib/pq
	if err != nil {
		panic(err)
	}
	defer db.Close()

	l, err := client().Mutex("reports:42").Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer l.Unlock(context.WithoutCancel(ctx))
	if err := saveReport(l.Context(), db, l, 42, "..."); err != nil {
		fmt.Println("not saved:", err) // errors.Is(err, redisync.ErrStaleToken): a newer holder wrote
	}
}
