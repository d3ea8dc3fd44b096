//! Deterministic TPC-W population (clause 4.7), scaled by items and
//! customers, bulk-loaded with `COPY … FROM STDIN`.
//!
//! Cardinalities follow TPC-W: 92 countries, items/4 authors, 2 addresses per
//! customer, 0.9 orders per customer with 1–5 lines each, one credit-card
//! transaction per order; carts start empty. Every row is a pure function of
//! (seed, table, row id): each row draws from its own ChaCha stream, so the
//! data does not depend on load order or chunking, and a row can be
//! recomputed anywhere (the credit-card transaction re-derives its order's
//! total). Dates are offsets from a fixed epoch (2025-01-01), not the wall
//! clock; orders are dated in the 60 days before the epoch, in id order, so
//! "the most recent N orders" (Best Sellers, Admin Confirm) means the highest
//! ids, as in TPC-W.

use std::fmt::Write as _;

use bytes::Bytes;
use futures_util::SinkExt;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio_postgres::Client;

use crate::error::{Error, Result};
use crate::schema;
use crate::words::{self, digsyl, EPOCH_DAYS};

/// Database size. Everything else is derived from these two numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Scale {
    pub items: u32,
    pub customers: u32,
}

/// Smallest supported scale: an item needs five distinct related items, and
/// the author rule (items/4) needs at least a few items.
pub const MIN_ITEMS: u32 = 10;
pub const MIN_CUSTOMERS: u32 = 10;
/// Upper bounds keep ids within `integer` and generation within hours.
pub const MAX_ITEMS: u32 = 10_000_000;
pub const MAX_CUSTOMERS: u32 = 100_000_000;

impl Scale {
    pub fn new(items: u32, customers: u32) -> Result<Scale> {
        if !(MIN_ITEMS..=MAX_ITEMS).contains(&items) {
            return Err(Error::Config(format!("--items must be in {MIN_ITEMS}..={MAX_ITEMS}, got {items}")));
        }
        if !(MIN_CUSTOMERS..=MAX_CUSTOMERS).contains(&customers) {
            return Err(Error::Config(format!(
                "--customers must be in {MIN_CUSTOMERS}..={MAX_CUSTOMERS}, got {customers}"
            )));
        }
        Ok(Scale { items, customers })
    }
    pub fn countries(&self) -> u32 {
        words::COUNTRIES.len() as u32
    }
    pub fn authors(&self) -> u32 {
        self.items / 4
    }
    pub fn addresses(&self) -> u32 {
        self.customers * 2
    }
    pub fn orders(&self) -> u32 {
        (u64::from(self.customers) * 9 / 10) as u32
    }
}

/// Row counts actually loaded, per table.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Loaded {
    pub rows: Vec<(&'static str, u64)>,
}

/// splitmix64: turns (seed, table, id) into well-spread independent seeds.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn row_rng(seed: u64, table: u64, id: u32) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(mix(mix(seed ^ (table << 56)) ^ u64::from(id)))
}

fn money(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

/// An order's generated fields that other tables need to agree with.
struct OrderFacts {
    customer: u32,
    lines: u32,
    sub_total_cents: i64,
    tax_cents: i64,
    total_cents: i64,
    date_s: i64,
}

const ORDER_SPAN_S: i64 = 60 * 86_400;
const T_COUNTRY: u64 = 1;
const T_AUTHOR: u64 = 2;
const T_ADDRESS: u64 = 3;
const T_CUSTOMER: u64 = 4;
const T_ITEM: u64 = 5;
const T_ORDER: u64 = 6;
const T_ORDER_LINE: u64 = 7;
const T_CC: u64 = 8;

fn order_facts(seed: u64, scale: &Scale, o_id: u32) -> OrderFacts {
    let mut rng = row_rng(seed, T_ORDER, o_id);
    let customer = rng.gen_range(1..=scale.customers);
    let lines = rng.gen_range(1..=5);
    let sub_total_cents: i64 = rng.gen_range(1_000..=999_999);
    let tax = sub_total_cents * 825 / 10_000;
    let total_cents = sub_total_cents + tax + 300 + 100 * i64::from(lines);
    // Monotone in id: order o_id is the o_id-th most ancient.
    let epoch_s = EPOCH_DAYS * 86_400;
    let start_s = epoch_s - ORDER_SPAN_S;
    let date_s = start_s + ORDER_SPAN_S * i64::from(o_id) / i64::from(scale.orders().max(1));
    OrderFacts { customer, lines, sub_total_cents, tax_cents: tax, total_cents, date_s }
}

/// Streams rows produced by `row(id, buf)` for ids `1..=count` into
/// `COPY table FROM STDIN` (text format), in chunks of about 256 KiB so
/// memory stays bounded whatever the scale.
async fn copy_table(
    client: &Client,
    table: &'static str,
    count: u32,
    mut row: impl FnMut(u32, &mut String),
) -> Result<u64> {
    const CHUNK_BYTES: usize = 256 * 1024;
    let sink =
        client.copy_in::<_, Bytes>(&format!("COPY {table} FROM STDIN")).await.map_err(Error::db("start COPY"))?;
    futures_util::pin_mut!(sink);
    let mut buf = String::with_capacity(CHUNK_BYTES + 4096);
    for id in 1..=count {
        row(id, &mut buf);
        if buf.len() >= CHUNK_BYTES {
            let chunk = std::mem::replace(&mut buf, String::with_capacity(CHUNK_BYTES + 4096));
            sink.send(Bytes::from(chunk)).await.map_err(Error::db("COPY data"))?;
        }
    }
    if !buf.is_empty() {
        sink.send(Bytes::from(buf)).await.map_err(Error::db("COPY data"))?;
    }
    sink.as_mut().finish().await.map_err(Error::db("finish COPY"))
}

/// Creates the schema and loads a complete database of the given scale.
/// Existing bookstore tables are dropped first. The load happens in one
/// transaction per table; keys and indexes are built at the end, so a load
/// interrupted midway leaves tables without keys, which the next `generate`
/// drops and rebuilds.
pub async fn generate(client: &mut Client, scale: Scale, seed: u64) -> Result<Loaded> {
    schema::create_tables(client).await?;
    let mut loaded = Loaded::default();
    let s = &scale;
    let n = copy_table(client, "country", s.countries(), |id, b| country_row(seed, id, b)).await?;
    loaded.rows.push(("country", n));
    let n = copy_table(client, "author", s.authors(), |id, b| author_row(seed, s, id, b)).await?;
    loaded.rows.push(("author", n));
    let n = copy_table(client, "address", s.addresses(), |id, b| address_row(seed, s, id, b)).await?;
    loaded.rows.push(("address", n));
    let n = copy_table(client, "customer", s.customers, |id, b| customer_row(seed, s, id, b)).await?;
    loaded.rows.push(("customer", n));
    // Scratch for an item's related items and an order's distinct items.
    let mut related: Vec<u32> = Vec::with_capacity(5);
    let n = copy_table(client, "item", s.items, |id, b| item_row(seed, s, id, &mut related, b)).await?;
    loaded.rows.push(("item", n));
    let n = copy_table(client, "orders", s.orders(), |id, b| orders_row(seed, s, id, b)).await?;
    loaded.rows.push(("orders", n));

    let mut lines_total = 0u64;
    let n_orders = s.orders();
    let sink_rows = copy_table(client, "order_line", n_orders, |o_id, b| {
        lines_total += order_line_rows(seed, s, o_id, &mut related, b);
    })
    .await?;
    debug_assert_eq!(sink_rows, lines_total);
    loaded.rows.push(("order_line", sink_rows));

    let n2 = copy_table(client, "cc_xacts", n_orders, |o_id, b| cc_xacts_row(seed, s, o_id, b)).await?;
    loaded.rows.push(("cc_xacts", n2));
    loaded.rows.push(("shopping_cart", 0));
    loaded.rows.push(("shopping_cart_line", 0));

    schema::finish(client).await?;
    Ok(loaded)
}

/// COUNTRY row `id` (a COPY text line appended to `b`).
fn country_row(seed: u64, id: u32, b: &mut String) {
    let mut rng = row_rng(seed, T_COUNTRY, id);
    let name = words::COUNTRIES[(id - 1) as usize];
    let exchange = rng.gen_range(0.01..100.0f64);
    let _ = writeln!(b, "{id}\t{name}\t{exchange:.6}\tCurrency{id}");
}

/// AUTHOR row `id`.
fn author_row(seed: u64, s: &Scale, id: u32, b: &mut String) {
    let mut rng = row_rng(seed, T_AUTHOR, id);
    let fname = words::astring(&mut rng, 3, 20);
    let lname = digsyl(u64::from(rng.gen_range(1..=s.authors().max(1))));
    let lname = &lname[..lname.len().min(20)];
    let mname = words::astring(&mut rng, 1, 20);
    let dob = EPOCH_DAYS - rng.gen_range(365 * 20..365 * 120);
    let bio = words::text(&mut rng, 125, 500);
    let _ = writeln!(b, "{id}\t{fname}\t{lname}\t{mname}\t{}\t{bio}", words::date_string(dob));
}

/// ADDRESS row `id`.
fn address_row(seed: u64, s: &Scale, id: u32, b: &mut String) {
    let mut rng = row_rng(seed, T_ADDRESS, id);
    let street1 = words::astring(&mut rng, 15, 40);
    let street2 = words::astring(&mut rng, 15, 40);
    let city = words::astring(&mut rng, 4, 30);
    let state = words::astring(&mut rng, 2, 20);
    let zip = words::astring(&mut rng, 5, 10);
    let country = rng.gen_range(1..=s.countries());
    let _ = writeln!(b, "{id}\t{street1}\t{street2}\t{city}\t{state}\t{zip}\t{country}");
}

/// CUSTOMER row `id`.
fn customer_row(seed: u64, s: &Scale, id: u32, b: &mut String) {
    let mut rng = row_rng(seed, T_CUSTOMER, id);
    let uname = digsyl(u64::from(id));
    let passwd = uname.to_lowercase();
    let fname = words::astring(&mut rng, 8, 15);
    let lname = words::astring(&mut rng, 8, 15);
    let addr = rng.gen_range(1..=s.addresses());
    let phone_len = rng.gen_range(9..=16);
    let phone = words::nstring(&mut rng, phone_len);
    let since = EPOCH_DAYS - rng.gen_range(1..=730);
    let last_login = (since + rng.gen_range(0..=60)).min(EPOCH_DAYS);
    let login_s = EPOCH_DAYS * 86_400;
    let discount = rng.gen_range(0..=50);
    let ytd = rng.gen_range(0..=99_999);
    let birth = EPOCH_DAYS - rng.gen_range(365 * 18..365 * 100);
    let data = words::text(&mut rng, 100, 500);
    let _ = writeln!(
        b,
        "{id}\t{uname}\t{passwd}\t{fname}\t{lname}\t{addr}\t{phone}\t{uname}@{fname}.com\t{}\t{}\t{}\t{}\t0.{discount:02}\t0.00\t{}\t{}\t{data}",
        words::date_string(since),
        words::date_string(last_login),
        words::timestamp_string(login_s),
        words::timestamp_string(login_s + 7_200),
        money(ytd),
        words::date_string(birth),
    );
}

/// ITEM row `id`; `related` is scratch for its five related items.
fn item_row(seed: u64, s: &Scale, id: u32, related: &mut Vec<u32>, b: &mut String) {
    let mut rng = row_rng(seed, T_ITEM, id);
    // TPC-W: the first items/4 items each get their own author, the rest
    // a random one, so every author has written at least one book.
    let author = if id <= s.authors() { id } else { rng.gen_range(1..=s.authors()) };
    let title = format!("{} {}", digsyl(u64::from(rng.gen_range(1..=s.items))), words::astring(&mut rng, 4, 40));
    let pub_date = EPOCH_DAYS - rng.gen_range(1..=365 * 75);
    let publisher = words::astring(&mut rng, 14, 60);
    let subject = words::SUBJECTS.choose(&mut rng).copied().unwrap_or("ARTS");
    let desc = words::text(&mut rng, 100, 500);
    related.clear();
    while related.len() < 5 {
        let r = rng.gen_range(1..=s.items);
        if r != id && !related.contains(&r) {
            related.push(r);
        }
    }
    let srp = rng.gen_range(100..=999_999);
    let cost = srp - srp * rng.gen_range(0..=50) / 100;
    let avail = pub_date + rng.gen_range(1..=30);
    let stock = rng.gen_range(10..=30);
    let isbn = words::astring(&mut rng, 13, 13);
    let pages = rng.gen_range(20..=9_999);
    let backing = words::BACKINGS.choose(&mut rng).copied().unwrap_or("PAPERBACK");
    let dims = format!(
        "{:.2}x{:.2}x{:.2}",
        rng.gen_range(1.0..99.99f64),
        rng.gen_range(1.0..99.99f64),
        rng.gen_range(1.0..99.99f64)
    );
    let _ = writeln!(
        b,
        "{id}\t{title}\t{author}\t{}\t{publisher}\t{subject}\t{desc}\t{}\t{}\t{}\t{}\t{}\timg{}/thumb_{id}.gif\timg{}/image_{id}.gif\t{}\t{}\t{}\t{stock}\t{isbn}\t{pages}\t{backing}\t{dims}",
        words::date_string(pub_date),
        related[0],
        related[1],
        related[2],
        related[3],
        related[4],
        id % 100,
        id % 100,
        money(srp),
        money(cost),
        words::date_string(avail),
    );
}

/// ORDERS row `id`.
fn orders_row(seed: u64, s: &Scale, id: u32, b: &mut String) {
    let f = order_facts(seed, s, id);
    let mut rng = row_rng(seed, T_ORDER, id ^ 0x8000_0000);
    let ship_type = words::SHIP_TYPES.choose(&mut rng).copied().unwrap_or("AIR");
    let ship_s = f.date_s + rng.gen_range(0..=7 * 86_400);
    let bill = rng.gen_range(1..=s.addresses());
    let ship = rng.gen_range(1..=s.addresses());
    let status = words::ORDER_STATUS.choose(&mut rng).copied().unwrap_or("PENDING");
    let _ = writeln!(
        b,
        "{id}\t{}\t{}\t{}\t{}\t{}\t{ship_type}\t{}\t{bill}\t{ship}\t{status}",
        f.customer,
        words::timestamp_string(f.date_s),
        money(f.sub_total_cents),
        money(f.tax_cents),
        money(f.total_cents),
        words::timestamp_string(ship_s),
    );
}

/// The ORDER_LINE rows of order `o_id`; `related` is scratch for the
/// order's distinct items. Returns how many lines it wrote.
fn order_line_rows(seed: u64, s: &Scale, o_id: u32, related: &mut Vec<u32>, b: &mut String) -> u64 {
    let f = order_facts(seed, s, o_id);
    let mut rng = row_rng(seed, T_ORDER_LINE, o_id);
    related.clear();
    for ol_id in 1..=f.lines {
        // Distinct items within an order, as a real cart would have.
        let item = loop {
            let i = rng.gen_range(1..=s.items);
            if !related.contains(&i) {
                break i;
            }
        };
        related.push(item);
        let qty = rng.gen_range(1..=300);
        let discount = rng.gen_range(0..=3);
        let comments = words::text(&mut rng, 20, 100);
        let _ = writeln!(b, "{ol_id}\t{o_id}\t{item}\t{qty}\t0.{discount:02}\t{comments}");
    }
    u64::from(f.lines)
}

/// CC_XACTS row of order `o_id`.
fn cc_xacts_row(seed: u64, s: &Scale, o_id: u32, b: &mut String) {
    let f = order_facts(seed, s, o_id);
    let mut rng = row_rng(seed, T_CC, o_id);
    let cc_type = words::CC_TYPES.choose(&mut rng).copied().unwrap_or("VISA");
    let num = words::nstring(&mut rng, 16);
    let name = format!("{} {}", words::astring(&mut rng, 5, 15), words::astring(&mut rng, 5, 15));
    let expire = EPOCH_DAYS + rng.gen_range(10..=730);
    let auth = words::astring(&mut rng, 15, 15);
    let country = rng.gen_range(1..=s.countries());
    let _ = writeln!(
        b,
        "{o_id}\t{cc_type}\t{num}\t{name}\t{}\t{auth}\t{}\t{}\t{country}",
        words::date_string(expire),
        money(f.total_cents),
        words::timestamp_string(f.date_s + rng.gen_range(0..=3_600)),
    );
}

/// Opens one plain connection (no TLS: the database is on loopback) and
/// drives it on a background task.
pub async fn connect(url: &str) -> Result<Client> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(Error::db("connect"))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::warn!("database connection closed: {e}");
        }
    });
    Ok(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_cardinalities_follow_tpcw() {
        let s = Scale::new(1_000, 2_880).unwrap();
        assert_eq!(s.authors(), 250);
        assert_eq!(s.addresses(), 5_760);
        assert_eq!(s.orders(), 2_592);
        assert_eq!(s.countries(), 92);
    }

    #[test]
    fn scale_bounds_are_enforced() {
        assert!(Scale::new(9, 100).is_err());
        assert!(Scale::new(100, 9).is_err());
        assert!(Scale::new(MAX_ITEMS + 1, 100).is_err());
    }

    #[test]
    fn orders_are_deterministic_and_dated_in_id_order() {
        let s = Scale::new(100, 1_000).unwrap();
        let mut last = i64::MIN;
        for id in 1..=s.orders() {
            let a = order_facts(42, &s, id);
            let b = order_facts(42, &s, id);
            assert_eq!((a.customer, a.lines, a.total_cents), (b.customer, b.lines, b.total_cents));
            assert!((1..=5).contains(&a.lines));
            assert!(a.date_s >= last);
            last = a.date_s;
        }
        assert!(last <= EPOCH_DAYS * 86_400);
        let other = order_facts(43, &s, 1);
        let same = order_facts(42, &s, 1);
        assert!(other.total_cents != same.total_cents || other.customer != same.customer);
    }
}
