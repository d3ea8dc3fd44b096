// node-postgres (pg) through the PostgreSQL gatekeeper: the driver's common paths, each printed
// as "ok WHAT"; the first failure prints "FAIL" with the error and exits 1. The URL is the only
// argument. lab/tests/test_pg_drivers.py installs the pinned packages and runs it.
const { Client, Pool } = require('pg');
const Cursor = require('pg-cursor');
const { from: copyFrom, to: copyTo } = require('pg-copy-streams');
const { pipeline, Readable, Writable } = require('stream');
const { promisify } = require('util');
const assert = require('assert');
const url = process.argv[2];
const ok = (w) => console.log('ok', w);

(async () => {
  const c = new Client({ connectionString: url });
  await c.connect(); ok('connect');
  let r = await c.query('select $1::int + 1 as n', [41]); assert.equal(r.rows[0].n, 42); ok('parameter');
  r = await c.query({ name: 'named', text: 'select $1::text as s', values: ['a'] });
  r = await c.query({ name: 'named', text: 'select $1::text as s', values: ['b'] }); assert.equal(r.rows[0].s, 'b'); ok('named statement reused');
  await c.query('create temp table t(id int primary key, v text)');
  for (let i = 0; i < 100; i++) await c.query('insert into t values ($1, $2)', [i, 'v' + i]);
  ok('100 inserts');
  await c.query('begin'); await c.query("insert into t values (1000, 'x')"); await c.query('savepoint s');
  await assert.rejects(c.query("insert into t values (1000, 'dup')"), e => e.code === '23505');
  await c.query('rollback to savepoint s'); await c.query('commit'); ok('transaction with a savepoint');
  await assert.rejects(c.query('select 1/0'), e => e.code === '22012'); await c.query('select 1'); ok('usable after an error');
  const cur = c.query(new Cursor('select g from generate_series(1, 5000) g'));
  let total = 0; for (;;) { const rows = await cur.read(500); if (!rows.length) break; total += rows.length; }
  await cur.close(); assert.equal(total, 5000); ok('cursor');
  const ins = c.query(copyFrom('copy t from stdin'));
  await promisify(pipeline)(Readable.from([...Array(1000).keys()].map(i => `${2000 + i}\tc\n`)), ins); ok('copy from');
  let bytes = 0; const out = c.query(copyTo('copy t to stdout'));
  await promisify(pipeline)(out, new Writable({ write(ch, e, cb) { bytes += ch.length; cb(); } })); ok('copy to ' + bytes + ' bytes');
  r = await c.query('select count(*)::int as n from t'); assert.equal(r.rows[0].n, 1101);
  // Multiple statements in one simple query.
  r = await c.query('select 1 as a; select 2 as b'); assert.equal(r.length, 2); ok('two statements in one query');
  await c.query('listen chan');
  const note = new Promise(res => c.once('notification', res));
  await c.query("notify chan, 'hello'"); const n = await note; assert.equal(n.payload, 'hello'); ok('notify');
  // The server's statement timeout (57014) on a statement the gate admitted.
  await c.query("set statement_timeout = '200ms'");
  await assert.rejects(c.query('select pg_sleep(3)'), e => e.code === '57014'); ok('statement timeout');
  await c.query('reset statement_timeout');
  await c.end();
  const pool = new Pool({ connectionString: url, max: 40 });
  const res = await Promise.all([...Array(300).keys()].map(i => pool.query('select $1::int as i from pg_sleep(0.001)', [i])));
  res.forEach((r, i) => assert.equal(r.rows[0].i, i)); ok('300 pooled queries');
  await pool.end();
  console.log('ALL OK');
})().catch(e => { console.error('FAIL', e); process.exit(1); });
