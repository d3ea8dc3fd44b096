import java.io.*;
import java.sql.*;
import java.util.*;
import java.util.concurrent.*;
import org.postgresql.PGConnection;
import org.postgresql.copy.CopyManager;

/**
 * pgjdbc through the PostgreSQL gatekeeper: the driver's common paths, each printed as "ok WHAT";
 * the first failure throws (exit 1). The JDBC URL is the only argument.
 * lab/tests/test_pg_drivers.py fetches the pinned driver (pom.xml) and runs this file.
 */
public class Check {
    static void ok(String what) { System.out.println("ok " + what); }
    public static void main(String[] a) throws Exception {
        String url = a[0];
        Properties p = new Properties();
        try (Connection c = DriverManager.getConnection(url, p)) {
            try (PreparedStatement ps = c.prepareStatement("select ?::int + 1")) {
                for (int i = 0; i < 10; i++) { // server-prepared after prepareThreshold (5)
                    ps.setInt(1, i);
                    try (ResultSet rs = ps.executeQuery()) { rs.next(); if (rs.getInt(1) != i + 1) throw new AssertionError(); }
                }
            }
            ok("prepared statement, server-prepared after the threshold");
            try (Statement s = c.createStatement()) { s.execute("create temp table t(id int primary key, v text)"); }
            c.setAutoCommit(false);
            try (PreparedStatement ps = c.prepareStatement("insert into t values (?, ?)")) {
                for (int i = 0; i < 500; i++) { ps.setInt(1, i); ps.setString(2, "v" + i); ps.addBatch(); }
                ps.executeBatch();
            }
            Savepoint sp = c.setSavepoint();
            try (Statement s = c.createStatement()) { s.execute("insert into t values (1, 'dup')"); throw new AssertionError("no error"); }
            catch (SQLException e) { if (!"23505".equals(e.getSQLState())) throw e; }
            c.rollback(sp);
            c.commit();
            ok("batch in a transaction, savepoint rolled back, commit");
            c.setAutoCommit(true);
            CopyManager cm = c.unwrap(PGConnection.class).getCopyAPI();
            StringBuilder in = new StringBuilder();
            for (int i = 1000; i < 3000; i++) in.append(i).append("\tcopied\n");
            long n = cm.copyIn("copy t from stdin", new StringReader(in.toString()));
            if (n != 2000) throw new AssertionError("copied " + n);
            StringWriter out = new StringWriter();
            cm.copyOut("copy (select * from t order by id) to stdout", out);
            ok("copy in " + n + ", copy out " + out.toString().length() + " chars");
            try (Statement s = c.createStatement()) {
                s.execute("select 1/0"); throw new AssertionError();
            } catch (SQLException e) { if (!"22012".equals(e.getSQLState())) throw e; }
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("select count(*) from t")) { rs.next(); if (rs.getInt(1) != 2500) throw new AssertionError(rs.getInt(1)); }
            ok("usable after an error");
            try (Statement s = c.createStatement()) {
                s.setQueryTimeout(1); // the driver cancels with a CancelRequest
                long t0 = System.nanoTime();
                try { s.execute("select pg_sleep(10)"); throw new AssertionError("no timeout"); }
                catch (SQLException e) { if (!"57014".equals(e.getSQLState())) throw e; }
                ok("query timeout cancelled after " + (System.nanoTime() - t0) / 1000000 + " ms");
            }
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("select 1")) { rs.next(); }
            ok("usable after a cancel");
            // A cursor: fetch size with autocommit off (portal, Execute with a row limit).
            c.setAutoCommit(false);
            try (Statement s = c.createStatement()) {
                s.setFetchSize(100);
                int rows = 0;
                try (ResultSet rs = s.executeQuery("select g from generate_series(1, 10000) g")) { while (rs.next()) rows++; }
                if (rows != 10000) throw new AssertionError(rows);
            }
            c.commit();
            c.setAutoCommit(true);
            ok("portal fetched 100 rows at a time");
            DatabaseMetaData md = c.getMetaData();
            try (ResultSet rs = md.getTables(null, null, "%", new String[]{"TABLE"})) { while (rs.next()) {} }
            ok("metadata: " + md.getDatabaseProductVersion());
            try (Statement s = c.createStatement()) { s.execute("listen chan"); s.execute("notify chan, 'hi'"); }
            org.postgresql.PGNotification[] notes = c.unwrap(PGConnection.class).getNotifications(3000);
            if (notes == null || notes.length != 1 || !"hi".equals(notes[0].getParameter())) throw new AssertionError("notes");
            ok("listen/notify");
        }
        ExecutorService ex = Executors.newFixedThreadPool(50);
        List<Future<Integer>> fs = new ArrayList<>();
        for (int i = 0; i < 50; i++) {
            final int k = i;
            fs.add(ex.submit(() -> {
                try (Connection c = DriverManager.getConnection(url); PreparedStatement ps = c.prepareStatement("select ?::int from pg_sleep(0.01)")) {
                    int sum = 0;
                    for (int j = 0; j < 10; j++) { ps.setInt(1, k); try (ResultSet rs = ps.executeQuery()) { rs.next(); sum += rs.getInt(1); } }
                    return sum;
                }
            }));
        }
        for (int i = 0; i < 50; i++) if (fs.get(i).get() != 10 * i) throw new AssertionError("conn " + i);
        ex.shutdown();
        ok("50 connections at once");
        System.out.println("ALL OK");
    }
}
