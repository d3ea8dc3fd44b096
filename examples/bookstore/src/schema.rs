//! The TPC-W schema (clause 1.3): ten tables, created empty before a bulk
//! load; keys, foreign keys, indexes and sequences are added after the load
//! (building them once is much faster than maintaining them row by row).
//!
//! Money is `numeric(15,2)` as TPC-W specifies; queries cast to `float8` at
//! the boundary so the server needs no decimal type. Identifier sequences
//! replace TPC-W's "max + 1 under a lock" for new customers, addresses,
//! orders and carts.
//!
//! Keys follow the TPC-W specification and its public reference
//! implementation (University of Wisconsin): `order_line`'s primary key is
//! (ol_id, ol_o_id), line number first. Secondary indexes serve the cheap
//! interactions' point lookups: item by subject/author/title, author by last
//! name, customer by user name, orders by customer, address by street, and
//! an equality-only *hash* index on `order_line.ol_o_id` so that Order
//! Display and Buy Confirm fetch one order's lines directly. Nothing serves
//! a *range* of order ids: Best Sellers ("the most recent 3,333 orders") and
//! Admin Confirm ("the most recent 10,000") scan `order_line`, as they did on
//! the reference implementation — which is what makes them the costly
//! interactions of the Gatekeeper paper's Table 1, their cost growing with
//! the database (customers × 0.9 orders × 3 lines).

use tokio_postgres::Client;

use crate::error::{Error, Result};

/// The tables, in dependency order (parents first).
pub const TABLES: [&str; 10] = [
    "country",
    "author",
    "address",
    "customer",
    "item",
    "orders",
    "order_line",
    "cc_xacts",
    "shopping_cart",
    "shopping_cart_line",
];

const CREATE_TABLES: &str = r#"
CREATE TABLE country (
    co_id       integer NOT NULL,
    co_name     varchar(50) NOT NULL,
    co_exchange numeric(12,6) NOT NULL,
    co_currency varchar(18) NOT NULL
);
CREATE TABLE author (
    a_id    integer NOT NULL,
    a_fname varchar(20) NOT NULL,
    a_lname varchar(20) NOT NULL,
    a_mname varchar(20) NOT NULL,
    a_dob   date NOT NULL,
    a_bio   varchar(500) NOT NULL
);
CREATE TABLE address (
    addr_id      integer NOT NULL,
    addr_street1 varchar(40) NOT NULL,
    addr_street2 varchar(40) NOT NULL,
    addr_city    varchar(30) NOT NULL,
    addr_state   varchar(20) NOT NULL,
    addr_zip     varchar(10) NOT NULL,
    addr_co_id   integer NOT NULL
);
CREATE TABLE customer (
    c_id         integer NOT NULL,
    c_uname      varchar(20) NOT NULL,
    c_passwd     varchar(20) NOT NULL,
    c_fname      varchar(17) NOT NULL,
    c_lname      varchar(17) NOT NULL,
    c_addr_id    integer NOT NULL,
    c_phone      varchar(18) NOT NULL,
    c_email      varchar(50) NOT NULL,
    c_since      date NOT NULL,
    c_last_login date NOT NULL,
    c_login      timestamp NOT NULL,
    c_expiration timestamp NOT NULL,
    c_discount   numeric(3,2) NOT NULL,
    c_balance    numeric(15,2) NOT NULL,
    c_ytd_pmt    numeric(15,2) NOT NULL,
    c_birthdate  date NOT NULL,
    c_data       varchar(510) NOT NULL
);
CREATE TABLE item (
    i_id         integer NOT NULL,
    i_title      varchar(60) NOT NULL,
    i_a_id       integer NOT NULL,
    i_pub_date   date NOT NULL,
    i_publisher  varchar(60) NOT NULL,
    i_subject    varchar(60) NOT NULL,
    i_desc       varchar(500) NOT NULL,
    i_related1   integer NOT NULL,
    i_related2   integer NOT NULL,
    i_related3   integer NOT NULL,
    i_related4   integer NOT NULL,
    i_related5   integer NOT NULL,
    i_thumbnail  varchar(40) NOT NULL,
    i_image      varchar(40) NOT NULL,
    i_srp        numeric(15,2) NOT NULL,
    i_cost       numeric(15,2) NOT NULL,
    i_avail      date NOT NULL,
    i_stock      integer NOT NULL,
    i_isbn       char(13) NOT NULL,
    i_page       integer NOT NULL,
    i_backing    varchar(15) NOT NULL,
    i_dimensions varchar(25) NOT NULL
);
CREATE TABLE orders (
    o_id           integer NOT NULL,
    o_c_id         integer NOT NULL,
    o_date         timestamp NOT NULL,
    o_sub_total    numeric(15,2) NOT NULL,
    o_tax          numeric(15,2) NOT NULL,
    o_total        numeric(15,2) NOT NULL,
    o_ship_type    varchar(10) NOT NULL,
    o_ship_date    timestamp NOT NULL,
    o_bill_addr_id integer NOT NULL,
    o_ship_addr_id integer NOT NULL,
    o_status       varchar(15) NOT NULL
);
CREATE TABLE order_line (
    ol_id       integer NOT NULL,
    ol_o_id     integer NOT NULL,
    ol_i_id     integer NOT NULL,
    ol_qty      integer NOT NULL,
    ol_discount numeric(3,2) NOT NULL,
    ol_comments varchar(110) NOT NULL
);
CREATE TABLE cc_xacts (
    cx_o_id      integer NOT NULL,
    cx_type      varchar(10) NOT NULL,
    cx_num       varchar(20) NOT NULL,
    cx_name      varchar(31) NOT NULL,
    cx_expire    date NOT NULL,
    cx_auth_id   char(15) NOT NULL,
    cx_xact_amt  numeric(15,2) NOT NULL,
    cx_xact_date timestamp NOT NULL,
    cx_co_id     integer NOT NULL
);
CREATE TABLE shopping_cart (
    sc_id   integer NOT NULL,
    sc_time timestamp NOT NULL
);
CREATE TABLE shopping_cart_line (
    scl_sc_id integer NOT NULL,
    scl_qty   integer NOT NULL,
    scl_i_id  integer NOT NULL
);
"#;

const CONSTRAINTS: &str = r#"
ALTER TABLE country ADD PRIMARY KEY (co_id);
ALTER TABLE author ADD PRIMARY KEY (a_id);
ALTER TABLE address ADD PRIMARY KEY (addr_id),
    ADD FOREIGN KEY (addr_co_id) REFERENCES country;
ALTER TABLE customer ADD PRIMARY KEY (c_id),
    ADD UNIQUE (c_uname),
    ADD FOREIGN KEY (c_addr_id) REFERENCES address;
ALTER TABLE item ADD PRIMARY KEY (i_id),
    ADD FOREIGN KEY (i_a_id) REFERENCES author,
    ADD CHECK (i_stock >= 0);
ALTER TABLE orders ADD PRIMARY KEY (o_id),
    ADD FOREIGN KEY (o_c_id) REFERENCES customer,
    ADD FOREIGN KEY (o_bill_addr_id) REFERENCES address,
    ADD FOREIGN KEY (o_ship_addr_id) REFERENCES address;
ALTER TABLE order_line ADD PRIMARY KEY (ol_id, ol_o_id),
    ADD FOREIGN KEY (ol_o_id) REFERENCES orders,
    ADD FOREIGN KEY (ol_i_id) REFERENCES item,
    ADD CHECK (ol_qty > 0);
ALTER TABLE cc_xacts ADD PRIMARY KEY (cx_o_id),
    ADD FOREIGN KEY (cx_o_id) REFERENCES orders,
    ADD FOREIGN KEY (cx_co_id) REFERENCES country,
    ADD CHECK (cx_type IN ('VISA', 'MASTERCARD', 'DISCOVER', 'AMEX', 'DINERS'));
ALTER TABLE shopping_cart ADD PRIMARY KEY (sc_id);
ALTER TABLE shopping_cart_line ADD PRIMARY KEY (scl_sc_id, scl_i_id),
    ADD FOREIGN KEY (scl_sc_id) REFERENCES shopping_cart ON DELETE CASCADE,
    ADD FOREIGN KEY (scl_i_id) REFERENCES item,
    ADD CHECK (scl_qty > 0);
CREATE INDEX item_subject ON item (i_subject);
CREATE INDEX item_author ON item (i_a_id);
CREATE INDEX item_title ON item (i_title);
CREATE INDEX author_lname ON author (a_lname);
CREATE INDEX orders_customer ON orders (o_c_id);
CREATE INDEX address_street ON address (addr_street1);
CREATE INDEX order_line_order ON order_line USING hash (ol_o_id);
"#;

/// Drops every bookstore table (if present) and creates them empty, without
/// keys or indexes. Runs in one transaction: either the old schema or the new
/// one, never half of each.
pub async fn create_tables(client: &mut Client) -> Result<()> {
    let tx = client.transaction().await.map_err(Error::db("begin create schema"))?;
    // Quiet the "does not exist, skipping" notices of a first run.
    let mut drop = String::from("SET LOCAL client_min_messages = warning; DROP TABLE IF EXISTS ");
    drop.push_str(&TABLES.iter().rev().copied().collect::<Vec<_>>().join(", "));
    drop.push_str(" CASCADE;");
    drop.push_str("DROP SEQUENCE IF EXISTS customer_seq, address_seq, orders_seq, shopping_cart_seq;");
    tx.batch_execute(&drop).await.map_err(Error::db("drop old schema"))?;
    tx.batch_execute(CREATE_TABLES).await.map_err(Error::db("create tables"))?;
    tx.commit().await.map_err(Error::db("commit create schema"))
}

/// Adds keys, foreign keys, checks and indexes after the bulk load, creates
/// the id sequences past the loaded ids, and refreshes planner statistics.
pub async fn finish(client: &mut Client) -> Result<()> {
    let tx = client.transaction().await.map_err(Error::db("begin finish schema"))?;
    tx.batch_execute(CONSTRAINTS).await.map_err(Error::db("add keys and indexes"))?;
    for (seq, table, column) in [
        ("customer_seq", "customer", "c_id"),
        ("address_seq", "address", "addr_id"),
        ("orders_seq", "orders", "o_id"),
        ("shopping_cart_seq", "shopping_cart", "sc_id"),
    ] {
        let sql = format!(
            "CREATE SEQUENCE {seq}; \
             SELECT setval('{seq}', (SELECT COALESCE(MAX({column}), 0) + 1 FROM {table}), false);"
        );
        tx.batch_execute(&sql).await.map_err(Error::db("create sequences"))?;
    }
    tx.commit().await.map_err(Error::db("commit finish schema"))?;
    client.batch_execute("ANALYZE").await.map_err(Error::db("analyze"))
}
