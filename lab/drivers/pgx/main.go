// pgx (Go's most used PostgreSQL driver) through the gatekeeper: the driver's common paths,
// each printed as "ok WHAT"; the first failure prints "FAIL WHAT: ERROR" and exits 1. The URL
// is the only argument. lab/tests/test_pg_drivers.py builds and runs it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

func must(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL %s: %v\n", what, err)
		os.Exit(1)
	}
	if what != "" {
		fmt.Println("ok", what)
	}
}

func main() {
	ctx := context.Background()
	dsn := os.Args[1]
	conn, err := pgx.Connect(ctx, dsn)
	must(err, "connect")
	defer conn.Close(ctx)

	var n int
	must(conn.QueryRow(ctx, "select $1::int + 1", 41).Scan(&n), "extended query with a parameter")
	if n != 42 {
		must(fmt.Errorf("got %d", n), "value")
	}
	// The statement cache: the same text again uses a named prepared statement.
	for i := 0; i < 5; i++ {
		must(conn.QueryRow(ctx, "select $1::text || 'x'", "a").Scan(new(string)), "")
	}
	fmt.Println("ok the statement cache's named statements")
	_, err = conn.Exec(ctx, "create temp table t(id int primary key, v text)")
	must(err, "create temp table")

	// A batch: pipelined Parse/Bind/Execute with one Sync.
	b := &pgx.Batch{}
	for i := 0; i < 100; i++ {
		b.Queue("insert into t values ($1, $2)", i, fmt.Sprint("v", i))
	}
	b.Queue("select count(*) from t")
	br := conn.SendBatch(ctx, b)
	for i := 0; i < 100; i++ {
		_, err := br.Exec()
		must(err, "")
	}
	var c int
	must(br.QueryRow().Scan(&c), "batch count")
	must(br.Close(), "batch close")
	if c != 100 {
		must(fmt.Errorf("count %d", c), "batch")
	}

	// COPY FROM STDIN.
	rows := [][]any{}
	for i := 1000; i < 2000; i++ {
		rows = append(rows, []any{i, "copied"})
	}
	copied, err := conn.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"id", "v"}, pgx.CopyFromRows(rows))
	must(err, "copy from")
	if copied != 1000 {
		must(fmt.Errorf("copied %d", copied), "copy count")
	}
	// COPY TO STDOUT through pgconn.
	var sb strings.Builder
	tag, err := conn.PgConn().CopyTo(ctx, &sb, "copy (select * from t order by id limit 10) to stdout")
	must(err, "copy to")
	fmt.Println("  ", tag.String(), len(sb.String()), "bytes")

	// A transaction with a savepoint and an error inside it.
	tx, err := conn.Begin(ctx)
	must(err, "begin")
	_, err = tx.Exec(ctx, "insert into t values (5000, 'tx')")
	must(err, "insert in tx")
	sp, err := tx.Begin(ctx)
	must(err, "savepoint")
	_, err = sp.Exec(ctx, "insert into t values (5000, 'dup')")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		must(fmt.Errorf("want 23505, got %v", err), "duplicate in savepoint")
	}
	must(sp.Rollback(ctx), "rollback to savepoint")
	must(tx.Commit(ctx), "commit")

	// An error outside a transaction leaves the connection usable.
	_, err = conn.Exec(ctx, "select 1/0")
	if !errors.As(err, &pgErr) || pgErr.Code != "22012" {
		must(fmt.Errorf("want 22012, got %v", err), "division by zero")
	}
	must(conn.QueryRow(ctx, "select 1").Scan(&n), "usable after an error")

	// Cancel: a context deadline makes pgx send a CancelRequest.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = conn.Exec(cctx, "select pg_sleep(5)")
	cancel()
	if err == nil {
		must(errors.New("no error"), "cancel by deadline")
	}
	fmt.Println("ok cancel by deadline:", err)
	// pgx closes the connection after a context cancel; reconnect.
	conn2, err := pgx.Connect(ctx, dsn)
	must(err, "reconnect")
	defer conn2.Close(ctx)

	// LISTEN/NOTIFY.
	_, err = conn2.Exec(ctx, "listen chan")
	must(err, "listen")
	_, err = conn2.Exec(ctx, "notify chan, 'hello'")
	must(err, "notify")
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	note, err := conn2.WaitForNotification(wctx)
	wcancel()
	must(err, "wait for notification")
	if note.Payload != "hello" {
		must(fmt.Errorf("payload %q", note.Payload), "notification")
	}

	// Rows with many values: a large result.
	r, err := conn2.Query(ctx, "select g, repeat('x', 100) from generate_series(1, 20000) g")
	must(err, "large result")
	cnt := 0
	for r.Next() {
		cnt++
	}
	must(r.Err(), "large result rows")
	if cnt != 20000 {
		must(fmt.Errorf("rows %d", cnt), "large result count")
	}

	// A pool of many connections at once (the gate queues them).
	pool, err := pgxpool.New(ctx, dsn+"&pool_max_conns=40")
	must(err, "pool")
	defer pool.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for i := 0; i < 400; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var x int
			if err := pool.QueryRow(ctx, "select $1::int from pg_sleep(0.001)", i).Scan(&x); err != nil {
				errs <- err
			} else if x != i {
				errs <- fmt.Errorf("got %d want %d", x, i)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		must(e, "pooled query")
	}
	fmt.Println("ok 400 pooled queries")
	// Simple protocol mode (QueryExecModeSimpleProtocol) with parameters interpolated.
	var s string
	must(conn2.QueryRow(ctx, "select $1::text", pgx.QueryExecModeSimpleProtocol, "it's").Scan(&s), "simple protocol")
	fmt.Println("ALL OK")
}
