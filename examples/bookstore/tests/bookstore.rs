//! End-to-end tests of the bookstore against a real PostgreSQL started by
//! the test (see `common`): data generation, and each interaction's effect
//! on the database through real HTTP on a persistent connection.

mod common;

use common::{data_attr, empty_db, fresh_db, pg, shop, shop_with_repeat, Browser};
use shortfirst_bookstore::gen::{self, Scale};
use shortfirst_bookstore::interactions::Interaction;
use shortfirst_bookstore::schema::TABLES;
use shortfirst_bookstore::words::digsyl;

macro_rules! require_pg {
    () => {
        match pg() {
            Some(pg) => pg,
            None => return,
        }
    };
}

async fn count(c: &tokio_postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
}

#[tokio::test]
async fn generated_database_has_tpcw_cardinalities_and_integrity() {
    let pg = require_pg!();
    let url = fresh_db(pg).await;
    let c = gen::connect(&url).await.unwrap();
    let s = Scale::new(common::ITEMS, common::CUSTOMERS).unwrap();
    for (table, expected) in [
        ("country", 92),
        ("author", i64::from(s.authors())),
        ("address", i64::from(s.addresses())),
        ("customer", i64::from(s.customers)),
        ("item", i64::from(s.items)),
        ("orders", i64::from(s.orders())),
        ("cc_xacts", i64::from(s.orders())),
        ("shopping_cart", 0),
        ("shopping_cart_line", 0),
    ] {
        assert_eq!(count(&c, &format!("SELECT count(*) FROM {table}")).await, expected, "{table}");
    }
    // 1–5 lines per order, 3 on average.
    let lines = count(&c, "SELECT count(*) FROM order_line").await;
    let orders = i64::from(s.orders());
    assert!(lines > orders * 27 / 10 && lines < orders * 33 / 10, "{lines} lines for {orders} orders");
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM (SELECT ol_o_id FROM order_line GROUP BY 1 HAVING count(*) NOT BETWEEN 1 AND 5) x"
        )
        .await,
        0
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM orders WHERE NOT EXISTS (SELECT 1 FROM order_line WHERE ol_o_id = o_id)").await,
        0
    );
    // Referential integrity, checked independently of the declared keys.
    for sql in [
        "SELECT count(*) FROM item LEFT JOIN author ON i_a_id = a_id WHERE a_id IS NULL",
        "SELECT count(*) FROM customer LEFT JOIN address ON c_addr_id = addr_id WHERE addr_id IS NULL",
        "SELECT count(*) FROM address LEFT JOIN country ON addr_co_id = co_id WHERE co_id IS NULL",
        "SELECT count(*) FROM orders LEFT JOIN customer ON o_c_id = c_id WHERE c_id IS NULL",
        "SELECT count(*) FROM order_line LEFT JOIN item ON ol_i_id = i_id WHERE i_id IS NULL",
        "SELECT count(*) FROM cc_xacts LEFT JOIN orders ON cx_o_id = o_id WHERE o_id IS NULL",
        "SELECT count(*) FROM item WHERE i_related1 NOT BETWEEN 1 AND (SELECT max(i_id) FROM item) OR i_related1 = i_id",
        "SELECT count(*) FROM cc_xacts JOIN orders ON cx_o_id = o_id WHERE cx_xact_amt <> o_total",
        "SELECT count(*) FROM author WHERE NOT EXISTS (SELECT 1 FROM item WHERE i_a_id = a_id)",
    ] {
        assert_eq!(count(&c, sql).await, 0, "{sql}");
    }
    // The declared keys exist (a half-finished load would lack them).
    let keys = count(
        &c,
        "SELECT count(*) FROM pg_constraint WHERE contype IN ('p', 'f') AND connamespace = 'public'::regnamespace",
    )
    .await;
    assert!(keys >= 10 + 12, "only {keys} keys");
    // TPC-W names: user name = DigSyl(c_id), password its lower case.
    let r = c.query_one("SELECT c_uname, c_passwd FROM customer WHERE c_id = 1029", &[]).await.unwrap();
    assert_eq!(r.get::<_, &str>(0), "OGBAALNG");
    assert_eq!(r.get::<_, &str>(1), "ogbaalng");
}

#[tokio::test]
async fn generation_is_deterministic_by_seed() {
    let pg = require_pg!();
    let scale = Scale::new(100, 200).unwrap();
    let mut digests = Vec::new();
    for seed in [5, 5, 6] {
        let url = empty_db(pg).await;
        let mut c = gen::connect(&url).await.unwrap();
        let loaded = gen::generate(&mut c, scale, seed).await.unwrap();
        assert_eq!(loaded.rows.len(), TABLES.len());
        let mut d = Vec::new();
        for t in TABLES {
            let sql = format!("SELECT md5(COALESCE(string_agg(x::text, '|' ORDER BY x::text), '')) FROM {t} x");
            d.push(c.query_one(&sql, &[]).await.unwrap().get::<_, String>(0));
        }
        digests.push(d);
    }
    assert_eq!(digests[0], digests[1], "same seed, same data");
    assert_ne!(digests[0][4], digests[2][4], "another seed, other items");
}

#[tokio::test]
async fn every_interaction_answers_with_a_full_page() {
    let pg = require_pg!();
    let url = fresh_db(pg).await;
    let shop = shop(&url).await;
    let mut b = Browser::connect(shop.addr).await;
    for which in Interaction::ALL {
        let page = b.get(which.path()).await;
        assert_eq!(page.status, 200, "{}: {}", which.name(), page.body);
        assert_eq!(page.headers["content-type"], "text/html; charset=utf-8");
        assert_eq!(page.headers["x-bookstore-interaction"], which.code());
        assert!(page.body.starts_with("<!DOCTYPE html>") && page.body.ends_with("</html>\n"));
        assert!(page.body.len() > 900, "{}: only {} bytes", which.name(), page.body.len());
    }
    assert_eq!(b.get("/").await.headers["x-bookstore-interaction"], "HOME");
    assert_eq!(b.get("/healthz").await.status, 200);
}

#[tokio::test]
async fn read_pages_show_the_database_rows() {
    let pg = require_pg!();
    let url = fresh_db(pg).await;
    let c = gen::connect(&url).await.unwrap();
    let shop = shop(&url).await;
    let mut b = Browser::connect(shop.addr).await;

    // Product Detail and Admin Request show the item and its author.
    let r =
        c.query_one("SELECT i_title, a_lname FROM item, author WHERE i_a_id = a_id AND i_id = 17", &[]).await.unwrap();
    for path in ["/product_detail?i_id=17", "/admin_request?i_id=17"] {
        let p = b.get(path).await;
        assert_eq!(data_attr(&p.body, "data-item-id"), Some(17), "{path}");
        assert!(p.body.contains(r.get::<_, &str>(0)) && p.body.contains(r.get::<_, &str>(1)), "{path}");
    }

    // New Products: the subject's newest items first.
    let newest: String = c
        .query_one(
            "SELECT i_title FROM item WHERE i_subject = 'HISTORY' ORDER BY i_pub_date DESC, i_title LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let p = b.get("/new_products?subject=HISTORY").await;
    assert_eq!(first_link_title(&p.body), Some(newest.as_str()));

    // Best Sellers: the subject's top item over the most recent 3,333
    // orders, computed here with an independent formulation of the query.
    let top: i32 = c
        .query_one(
            "SELECT ol_i_id FROM order_line JOIN item ON i_id = ol_i_id \
             WHERE i_subject = 'COOKING' AND ol_o_id IN (SELECT o_id FROM orders ORDER BY o_id DESC LIMIT 3333) \
             GROUP BY ol_i_id ORDER BY sum(ol_qty) DESC, ol_i_id LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let p = b.get("/best_sellers?subject=COOKING").await;
    assert_eq!(p.status, 200);
    let rank1 = p.body.find("<td>1</td>").expect("ranked rows");
    assert_eq!(
        p.body[rank1..].split("/product_detail?i_id=").nth(1).and_then(|s| s.split('"').next()),
        Some(top.to_string().as_str())
    );

    // Search Results by author, title and subject.
    let lname: String = c.query_one("SELECT a_lname FROM author WHERE a_id = 3", &[]).await.unwrap().get(0);
    let p = b.get(&format!("/search_results?type=author&q={lname}")).await;
    let hits = p.body.matches("/product_detail?i_id=").count();
    let expected = count(
        &c,
        &format!("SELECT least(50, count(*)) FROM item, author WHERE i_a_id = a_id AND a_lname LIKE '{lname}%'"),
    )
    .await;
    assert!(expected >= 1);
    assert_eq!(hits as i64, expected + promo_links(&p.body), "author search");
    let p = b.get("/search_results?type=title&q=OGBA").await;
    let expected = count(&c, "SELECT least(50, count(*)) FROM item WHERE i_title LIKE '%OGBA%'").await;
    assert_eq!(p.body.matches("/product_detail?i_id=").count() as i64, expected + promo_links(&p.body));
    // LIKE wildcards in user input are literal.
    let p = b.get("/search_results?type=title&q=%25").await;
    assert_eq!(p.body.matches("/product_detail?i_id=").count() as i64, promo_links(&p.body));
    let p = b.get("/search_results?type=subject&q=travel").await;
    assert_eq!(p.status, 200);
    let expected = count(&c, "SELECT least(50, count(*)) FROM item WHERE i_subject = 'TRAVEL'").await;
    assert!(p.body.contains(&format!("{expected} results")), "{}", p.body);

    // Home greets a known customer by name.
    let r = c.query_one("SELECT c_fname FROM customer WHERE c_id = 42", &[]).await.unwrap();
    let p = b.get("/home?c_id=42").await;
    assert!(p.body.contains(&format!("Welcome back, {}", r.get::<_, &str>(0))));
}

/// Scans of `order_line` PostgreSQL has counted so far in this database.
const ORDER_LINE_SCANS: &str =
    "SELECT seq_scan + COALESCE(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = 'order_line'";

/// `ORDER_LINE_SCANS` once the backends that did them have exited (a backend
/// flushes its statistics when it exits, so the count is polled until it
/// moves and then holds still).
async fn order_line_scans_after(c: &tokio_postgres::Client, before: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut last = before;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let now = count(c, ORDER_LINE_SCANS).await;
        if now != before && now == last {
            return now;
        }
        assert!(tokio::time::Instant::now() < deadline, "order_line statistics never settled ({before} -> {now})");
        last = now;
    }
}

/// `bookstore serve --best-sellers-repeat N` runs Best Sellers' ranking query
/// N times per request (N times the database work, counted by PostgreSQL as
/// scans of order_line) and answers with the same page; N outside 1..=100
/// is refused by name.
#[tokio::test]
async fn best_sellers_repeat_multiplies_its_database_work() {
    let pg = require_pg!();
    let url = fresh_db(pg).await;
    let c = gen::connect(&url).await.unwrap();
    let mut work = Vec::new();
    let mut pages = Vec::new();
    for repeat in [1, 4] {
        let before = count(&c, ORDER_LINE_SCANS).await;
        {
            let shop = shop_with_repeat(&url, repeat).await;
            assert_eq!(shop.store.best_sellers_repeat(), repeat);
            let mut b = Browser::connect(shop.addr).await;
            let p = b.get("/best_sellers?subject=COOKING").await;
            assert_eq!(p.status, 200);
            pages.push(p.body.split("Also of interest").next().unwrap().to_string());
        }
        work.push(order_line_scans_after(&c, before).await - before);
    }
    assert!(work[0] >= 1, "Best Sellers did not read order_line: {work:?}");
    assert_eq!(work[1], 4 * work[0], "scans of order_line with repeat 1 and 4");
    assert_eq!(pages[0], pages[1], "the same ranking whatever the repeat");

    let pool = shortfirst_bookstore::db::pool(&url, 1, std::time::Duration::from_secs(5)).unwrap();
    for bad in [0, 101] {
        let err = match shortfirst_bookstore::interactions::Store::open_with(pool.clone(), 1, bad).await {
            Ok(_) => panic!("repeat {bad} accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("Best Sellers repeat") && err.contains(&bad.to_string()), "{err}");
    }
}

/// The text of the first product link on a page.
fn first_link_title(body: &str) -> Option<&str> {
    let start = body.find("/product_detail?i_id=")?;
    let rest = &body[start..];
    let open = rest.find("\">")? + 2;
    rest[open..].split("</a>").next()
}

/// Links in the promotion block ("Also of interest"), which every listing
/// page carries in addition to its results.
fn promo_links(body: &str) -> i64 {
    body.split("Also of interest").nth(1).map(|s| s.matches("/product_detail?i_id=").count() as i64).unwrap_or(0)
}

#[tokio::test]
async fn shopping_cart_session_lives_in_cookies() {
    let pg = require_pg!();
    let url = fresh_db(pg).await;
    let c = gen::connect(&url).await.unwrap();
    let shop = shop(&url).await;
    let mut b = Browser::connect(shop.addr).await;

    let p = b.get("/shopping_cart?i_id=10").await;
    let sc: i32 = b.cookies["sc_id"].parse().unwrap();
    assert_eq!(data_attr(&p.body, "data-cart-id"), Some(sc));
    b.get("/shopping_cart?i_id=10").await;
    b.get("/shopping_cart?i_id=11").await;
    let qty = |i: i32| {
        let c = &c;
        async move {
            c.query_opt("SELECT scl_qty FROM shopping_cart_line WHERE scl_sc_id = $1 AND scl_i_id = $2", &[&sc, &i])
                .await
                .unwrap()
                .map(|r| r.get::<_, i32>(0))
        }
    };
    assert_eq!(qty(10).await, Some(2));
    assert_eq!(qty(11).await, Some(1));
    // Quantity updates: 0 removes a line.
    b.get("/shopping_cart?qty_10=5&qty_11=0").await;
    assert_eq!(qty(10).await, Some(5));
    assert_eq!(qty(11).await, None);
    // A visit without a cart gets a new one holding one random item.
    let mut other = Browser::connect(shop.addr).await;
    other.get("/shopping_cart").await;
    let sc2: i32 = other.cookies["sc_id"].parse().unwrap();
    assert_ne!(sc, sc2);
    assert_eq!(count(&c, &format!("SELECT count(*) FROM shopping_cart_line WHERE scl_sc_id = {sc2}")).await, 1);
    // Unknown item: 404, and nothing added.
    let p = b.get("/shopping_cart?i_id=999999").await;
    assert_eq!(p.status, 404);
    assert_eq!(count(&c, &format!("SELECT count(*) FROM shopping_cart_line WHERE scl_sc_id = {sc}")).await, 1);
}

#[tokio::test]
async fn buy_confirm_is_one_transaction() {
    let pg = require_pg!();
    let url = fresh_db(pg).await;
    let c = gen::connect(&url).await.unwrap();
    let shop = shop(&url).await;
    let mut b = Browser::connect(shop.addr).await;
    c.batch_execute("UPDATE item SET i_stock = 25 WHERE i_id IN (20, 21)").await.unwrap();

    // Register a new customer (Buy Request), fill the cart, buy.
    b.get("/shopping_cart?i_id=20").await;
    b.get("/shopping_cart?i_id=21").await;
    b.get("/shopping_cart?i_id=21").await;
    let p = b.get("/buy_request?new=1&fname=Ada&lname=Lovelace&country=Japan&street1=1%20Analytical%20Way&city=London&zip=12345").await;
    assert_eq!(p.status, 200, "{}", p.body);
    let c_id: i32 = b.cookies["c_id"].parse().unwrap();
    assert!(c_id > common::CUSTOMERS as i32);
    let r = c
        .query_one("SELECT c_uname, c_fname, co_name FROM customer, address, country WHERE c_id = $1 AND c_addr_id = addr_id AND addr_co_id = co_id", &[&c_id])
        .await
        .unwrap();
    assert_eq!(r.get::<_, &str>(0), digsyl(c_id as u64));
    assert_eq!((r.get::<_, &str>(1), r.get::<_, &str>(2)), ("Ada", "Japan"));

    let orders_before = count(&c, "SELECT count(*) FROM orders").await;
    let p = b.get("/buy_confirm?cc_type=VISA&ship_type=AIR").await;
    assert_eq!(p.status, 200, "{}", p.body);
    let o_id = data_attr(&p.body, "data-order-id").expect("order id on the page");
    assert_eq!(count(&c, "SELECT count(*) FROM orders").await, orders_before + 1);
    let o =
        c.query_one("SELECT o_c_id, o_total::float8, o_status FROM orders WHERE o_id = $1", &[&o_id]).await.unwrap();
    assert_eq!(o.get::<_, i32>(0), c_id);
    assert_eq!(o.get::<_, &str>(2), "PENDING");
    let lines =
        c.query("SELECT ol_i_id, ol_qty FROM order_line WHERE ol_o_id = $1 ORDER BY ol_i_id", &[&o_id]).await.unwrap();
    let lines: Vec<(i32, i32)> = lines.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(lines, vec![(20, 1), (21, 2)]);
    let cx =
        c.query_one("SELECT cx_type, cx_xact_amt::float8 FROM cc_xacts WHERE cx_o_id = $1", &[&o_id]).await.unwrap();
    assert_eq!(cx.get::<_, &str>(0), "VISA");
    assert!((cx.get::<_, f64>(1) - o.get::<_, f64>(1)).abs() < 0.01);
    let stock: Vec<i32> = c
        .query("SELECT i_stock FROM item WHERE i_id IN (20, 21) ORDER BY i_id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(stock, vec![24, 23]);
    let sc: i32 = b.cookies["sc_id"].parse().unwrap();
    assert_eq!(count(&c, &format!("SELECT count(*) FROM shopping_cart_line WHERE scl_sc_id = {sc}")).await, 0);

    // A buy the database rejects at its last step (unknown card type,
    // refused by a CHECK constraint after the order and its lines were
    // written) leaves nothing behind: no order, no lines, stock and cart
    // untouched.
    b.get("/shopping_cart?i_id=20").await;
    let lines_before = count(&c, "SELECT count(*) FROM order_line").await;
    let p = b.get("/buy_confirm?cc_type=BOGUS").await;
    assert_eq!(p.status, 400, "{}", p.body);
    assert!(p.body.contains("rejected by the database"), "{}", p.body);
    assert_eq!(count(&c, "SELECT count(*) FROM orders").await, orders_before + 1);
    assert_eq!(count(&c, "SELECT count(*) FROM order_line").await, lines_before);
    assert_eq!(count(&c, "SELECT i_stock::bigint FROM item WHERE i_id = 20").await, 24);
    assert_eq!(count(&c, &format!("SELECT count(*) FROM shopping_cart_line WHERE scl_sc_id = {sc}")).await, 1);

    // An explicitly empty cart cannot be bought.
    b.get("/shopping_cart?qty_20=0").await; // refills with one random item …
    let random_item: i32 =
        c.query_one("SELECT scl_i_id FROM shopping_cart_line WHERE scl_sc_id = $1", &[&sc]).await.unwrap().get(0);
    c.execute("DELETE FROM shopping_cart_line WHERE scl_sc_id = $1", &[&sc]).await.unwrap(); // … emptied behind its back
    let p = b.get("/buy_confirm").await;
    assert_eq!(p.status, 400);
    assert!(p.body.contains("is empty"));
    assert!(random_item >= 1);
    assert_eq!(count(&c, "SELECT count(*) FROM orders").await, orders_before + 1);

    // Stock replenishment: TPC-W adds 21 when fewer than 10 would remain.
    c.batch_execute("UPDATE item SET i_stock = 10 WHERE i_id = 30").await.unwrap();
    b.get("/shopping_cart?i_id=30").await;
    b.get("/shopping_cart?qty_30=3").await;
    assert_eq!(b.get("/buy_confirm?cc_type=AMEX").await.status, 200);
    assert_eq!(count(&c, "SELECT i_stock::bigint FROM item WHERE i_id = 30").await, 10 - 3 + 21);
}

#[tokio::test]
async fn returning_customers_log_in_and_see_their_last_order() {
    let pg = require_pg!();
    let url = fresh_db(pg).await;
    let c = gen::connect(&url).await.unwrap();
    let shop = shop(&url).await;
    let mut b = Browser::connect(shop.addr).await;

    // A customer with orders: the most recent one is displayed.
    let r = c
        .query_one(
            "SELECT o_c_id, max(o_id) FROM orders GROUP BY o_c_id HAVING count(*) >= 2 ORDER BY o_c_id LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    let (cust, last): (i32, i32) = (r.get(0), r.get(1));
    let uname = digsyl(cust as u64);
    let p = b.get(&format!("/order_display?uname={uname}&passwd={}", uname.to_lowercase())).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert_eq!(data_attr(&p.body, "data-order-id"), Some(last));
    let n_lines = count(&c, &format!("SELECT count(*) FROM order_line WHERE ol_o_id = {last}")).await;
    assert_eq!(p.body.matches("/product_detail?i_id=").count() as i64, n_lines);
    // Wrong password and unknown user are refused.
    assert_eq!(b.get(&format!("/order_display?uname={uname}&passwd=nope")).await.status, 400);
    assert_eq!(b.get("/order_display?uname=NOSUCHUSER&passwd=x").await.status, 404);

    // Buy Request logs the customer in and refreshes the session.
    c.execute("UPDATE customer SET c_login = '2000-01-01' WHERE c_id = $1", &[&cust]).await.unwrap();
    let p = b.get(&format!("/buy_request?uname={uname}&passwd={}", uname.to_lowercase())).await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert_eq!(b.cookies["c_id"], cust.to_string());
    assert_eq!(
        count(
            &c,
            &format!("SELECT count(*) FROM customer WHERE c_id = {cust} AND c_login > now() - interval '1 minute'")
        )
        .await,
        1
    );
    assert_eq!(b.get(&format!("/buy_request?uname={uname}&passwd=wrong")).await.status, 400);
}

#[tokio::test]
async fn admin_confirm_updates_the_item_and_its_related_items() {
    let pg = require_pg!();
    let url = fresh_db(pg).await;
    let c = gen::connect(&url).await.unwrap();
    let shop = shop(&url).await;
    let mut b = Browser::connect(shop.addr).await;

    // The item bought most recently has history to mine.
    let i_id: i32 =
        c.query_one("SELECT ol_i_id FROM order_line ORDER BY ol_o_id DESC, ol_id LIMIT 1", &[]).await.unwrap().get(0);
    // Independent formulation: items co-purchased by this item's recent
    // buyers, by total quantity.
    let expected: Vec<i32> = c
        .query(
            "WITH buyers AS (SELECT DISTINCT o.o_c_id FROM orders o JOIN order_line l ON l.ol_o_id = o.o_id \
               WHERE l.ol_i_id = $1 AND o.o_id > (SELECT max(o_id) - 10000 FROM orders)) \
             SELECT l.ol_i_id FROM order_line l JOIN orders o ON o.o_id = l.ol_o_id JOIN buyers b ON b.o_c_id = o.o_c_id \
             WHERE l.ol_i_id <> $1 GROUP BY l.ol_i_id ORDER BY sum(l.ol_qty) DESC, l.ol_i_id LIMIT 5",
            &[&i_id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let p = b.get(&format!("/admin_confirm?i_id={i_id}&cost=12.34&image=new.gif&thumbnail=new_t.gif")).await;
    assert_eq!(p.status, 200, "{}", p.body);
    let r = c
        .query_one(
            "SELECT i_cost::float8, i_image, i_thumbnail, i_pub_date = CURRENT_DATE, \
             ARRAY[i_related1, i_related2, i_related3, i_related4, i_related5] FROM item WHERE i_id = $1",
            &[&i_id],
        )
        .await
        .unwrap();
    assert_eq!(r.get::<_, f64>(0), 12.34);
    assert_eq!((r.get::<_, &str>(1), r.get::<_, &str>(2)), ("new.gif", "new_t.gif"));
    assert!(r.get::<_, bool>(3));
    let related: Vec<i32> = r.get(4);
    assert_eq!(related[..expected.len()], expected[..]);
    assert!(!related.contains(&i_id));
    // Unknown item: 404 and no change anywhere.
    assert_eq!(b.get("/admin_confirm?i_id=999999&cost=1").await.status, 404);
}

#[tokio::test]
async fn bad_requests_get_clear_errors() {
    let pg = require_pg!();
    let url = fresh_db(pg).await;
    let shop = shop(&url).await;
    let mut b = Browser::connect(shop.addr).await;
    for (path, status, needle) in [
        ("/product_detail?i_id=abc", 400, "must be an integer"),
        ("/product_detail?i_id=999999", 404, "item 999999"),
        ("/new_products?subject=KNITTING", 400, "unknown subject"),
        ("/search_results?type=isbn&q=1", 400, "search type"),
        ("/admin_confirm?i_id=1&cost=-5", 400, "cost"),
        ("/buy_confirm?cc_expiry=someday", 400, "cc_expiry"),
        ("/no_such_page", 404, "no page"),
    ] {
        let p = b.get(path).await;
        assert_eq!(p.status, status, "{path}: {}", p.body);
        assert!(p.body.contains(needle), "{path}: {}", p.body);
    }
    // The connection survives errors (browsers keep theirs for the session).
    assert_eq!(b.get("/home").await.status, 200);
}
