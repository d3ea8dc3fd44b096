//! The database work several interactions share (TPC-W's getRelated,
//! getBook, cart and address helpers), the rows they return, and statement
//! preparation.

use deadpool_postgres::GenericClient;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tokio_postgres::Statement;

use super::{Session, Store};
use crate::error::{Error, Result};
use crate::html::{esc, item_link};

impl Store {
    /// TPC-W getRelated: the five items promoted next to a random item.
    pub(super) async fn promotion<C: GenericClient>(&self, c: &C, rng: &mut ChaCha8Rng) -> Result<String> {
        let i_id = rng.gen_range(1..=self.items);
        let st = prep(
            c,
            "SELECT j.i_id, j.i_title, j.i_thumbnail FROM item i, item j \
                 WHERE i.i_id = $1 AND j.i_id IN (i.i_related1, i.i_related2, i.i_related3, \
                 i.i_related4, i.i_related5) ORDER BY j.i_id",
        )
        .await?;
        let rows = c.query(&st, &[&i_id]).await.map_err(Error::db("promotion"))?;
        let mut out = String::from("<h3>Also of interest</h3>\n<ul class=\"promo\">\n");
        for r in rows {
            let id: i32 = r.get(0);
            let title: &str = r.get(1);
            let thumb: &str = r.get(2);
            out.push_str(&format!("<li>{} <small>({})</small></li>\n", item_link(id, title), esc(thumb)));
        }
        out.push_str("</ul>\n");
        Ok(out)
    }

    /// TPC-W getBook: an item with its author.
    pub(super) async fn book<C: GenericClient>(&self, c: &C, i_id: i32) -> Result<Book> {
        let st = prep(
            c,
            "SELECT i_title, a_fname, a_lname, i_pub_date::text, i_publisher, i_subject, \
                 i_desc, i_thumbnail, i_image, i_srp::float8, i_cost::float8, i_avail::text, \
                 i_isbn, i_page, i_backing, i_dimensions, i_stock \
                 FROM item, author WHERE i_id = $1 AND i_a_id = a_id",
        )
        .await?;
        let r = c
            .query_opt(&st, &[&i_id])
            .await
            .map_err(Error::db("get book"))?
            .ok_or_else(|| Error::NotFound(format!("item {i_id}")))?;
        Ok(Book {
            i_id,
            title: r.get(0),
            author: format!("{} {}", r.get::<_, &str>(1), r.get::<_, &str>(2)),
            pub_date: r.get(3),
            publisher: r.get(4),
            subject: r.get(5),
            desc: r.get(6),
            thumbnail: r.get(7),
            image: r.get(8),
            srp: r.get(9),
            cost: r.get(10),
            avail: r.get(11),
            isbn: r.get(12),
            pages: r.get(13),
            backing: r.get(14),
            dimensions: r.get(15),
            stock: r.get(16),
        })
    }

    /// Returns the cart to use: the session's if it still exists, else a new
    /// one (TPC-W createEmptyCart).
    pub(super) async fn cart<C: GenericClient>(&self, c: &C, session: Session) -> Result<(i32, bool)> {
        if let Some(sc) = session.sc_id {
            let st = prep(c, "SELECT 1 FROM shopping_cart WHERE sc_id = $1").await?;
            if c.query_opt(&st, &[&sc]).await.map_err(Error::db("find cart"))?.is_some() {
                return Ok((sc, false));
            }
        }
        let st = prep(
            c,
            "INSERT INTO shopping_cart (sc_id, sc_time) \
                 VALUES (nextval('shopping_cart_seq'), now()) RETURNING sc_id",
        )
        .await?;
        let row = c.query_one(&st, &[]).await.map_err(Error::db("create cart"))?;
        Ok((row.get(0), true))
    }

    /// TPC-W addItem: one more of `i_id` in the cart.
    pub(super) async fn add_to_cart<C: GenericClient>(&self, c: &C, sc_id: i32, i_id: i32) -> Result<()> {
        let st = prep(
            c,
            "INSERT INTO shopping_cart_line (scl_sc_id, scl_qty, scl_i_id) VALUES ($1, 1, $2) \
                 ON CONFLICT (scl_sc_id, scl_i_id) DO UPDATE SET scl_qty = shopping_cart_line.scl_qty + 1",
        )
        .await?;
        c.execute(&st, &[&sc_id, &i_id]).await.map_err(|e| match Error::db("add item")(e) {
            Error::Rejected { .. } => Error::NotFound(format!("item {i_id}")),
            other => other,
        })?;
        Ok(())
    }

    /// TPC-W getCart: the cart's lines with their items.
    pub(super) async fn cart_lines<C: GenericClient>(&self, c: &C, sc_id: i32) -> Result<Vec<CartLine>> {
        let st = prep(
            c,
            "SELECT scl_i_id, i_title, i_cost::float8, i_srp::float8, i_backing, scl_qty \
                 FROM shopping_cart_line, item WHERE scl_i_id = i_id AND scl_sc_id = $1 \
                 ORDER BY i_title, scl_i_id",
        )
        .await?;
        let rows = c.query(&st, &[&sc_id]).await.map_err(Error::db("get cart"))?;
        Ok(rows
            .into_iter()
            .map(|r| CartLine {
                i_id: r.get(0),
                title: r.get(1),
                cost: r.get(2),
                srp: r.get(3),
                backing: r.get(4),
                qty: r.get(5),
            })
            .collect())
    }

    /// The Shopping Cart interaction's database work, shared with Buy
    /// Request/Confirm: find or create the cart, apply additions and quantity
    /// changes, put a random item in an empty cart (TPC-W
    /// addRandomItemToCartIfNecessary), touch its time, read it back.
    pub(super) async fn update_cart<C: GenericClient>(
        &self,
        c: &C,
        session: Session,
        add: Option<i32>,
        quantities: &[(i32, i32)],
        rng: &mut ChaCha8Rng,
    ) -> Result<(i32, Vec<CartLine>)> {
        let (sc_id, _) = self.cart(c, session).await?;
        if let Some(i_id) = add {
            self.add_to_cart(c, sc_id, i_id).await?;
        }
        for &(i_id, qty) in quantities {
            if qty == 0 {
                let st = prep(c, "DELETE FROM shopping_cart_line WHERE scl_sc_id = $1 AND scl_i_id = $2").await?;
                c.execute(&st, &[&sc_id, &i_id]).await.map_err(Error::db("remove line"))?;
            } else {
                let st = prep(c, "UPDATE shopping_cart_line SET scl_qty = $3 WHERE scl_sc_id = $1 AND scl_i_id = $2")
                    .await?;
                c.execute(&st, &[&sc_id, &i_id, &qty]).await.map_err(Error::db("set quantity"))?;
            }
        }
        let st = prep(c, "SELECT count(*) FROM shopping_cart_line WHERE scl_sc_id = $1").await?;
        let n: i64 = c.query_one(&st, &[&sc_id]).await.map_err(Error::db("count cart"))?.get(0);
        if n == 0 {
            let i_id = rng.gen_range(1..=self.items);
            self.add_to_cart(c, sc_id, i_id).await?;
        }
        let st = prep(c, "UPDATE shopping_cart SET sc_time = now() WHERE sc_id = $1").await?;
        c.execute(&st, &[&sc_id]).await.map_err(Error::db("touch cart"))?;
        let lines = self.cart_lines(c, sc_id).await?;
        Ok((sc_id, lines))
    }

    /// TPC-W enterAddress: reuse an identical address or insert a new one.
    pub(super) async fn enter_address<C: GenericClient>(&self, c: &C, a: &Address) -> Result<i32> {
        let st = prep(c, "SELECT co_id FROM country WHERE co_name = $1").await?;
        let co_id: i32 = c
            .query_opt(&st, &[&a.country])
            .await
            .map_err(Error::db("find country"))?
            .ok_or_else(|| Error::BadRequest(format!("unknown country '{}'", a.country)))?
            .get(0);
        let st = prep(
            c,
            "SELECT addr_id FROM address WHERE addr_street1 = $1 AND addr_street2 = $2 \
                 AND addr_city = $3 AND addr_state = $4 AND addr_zip = $5 AND addr_co_id = $6",
        )
        .await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
            [&a.street1, &a.street2, &a.city, &a.state, &a.zip, &co_id];
        if let Some(r) = c.query_opt(&st, &params).await.map_err(Error::db("find address"))? {
            return Ok(r.get(0));
        }
        let st = prep(
            c,
            "INSERT INTO address (addr_id, addr_street1, addr_street2, addr_city, addr_state, \
                 addr_zip, addr_co_id) VALUES (nextval('address_seq'), $1, $2, $3, $4, $5, $6) \
                 RETURNING addr_id",
        )
        .await?;
        Ok(c.query_one(&st, &params).await.map_err(Error::db("insert address"))?.get(0))
    }
}

/// A malformed or out-of-range date given by the client.
pub(super) fn is_date_error(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    matches!(
        e.code(),
        Some(c) if *c == SqlState::INVALID_DATETIME_FORMAT || *c == SqlState::DATETIME_FIELD_OVERFLOW
    )
}

tokio::task_local! {
    /// The route of the interaction running on this task, when the store tags its
    /// statements (`Options::route_comments`; `Store::handle` sets it).
    pub(super) static ROUTE: &'static str;
}

/// Prepares a statement once per pooled connection (deadpool caches it), so
/// the cheap interactions cost execution, not planning. Within a tagged
/// interaction the text carries its route (`with_route`): one cached statement
/// per interaction and query.
pub(super) async fn prep<C: GenericClient>(c: &C, sql: &str) -> Result<Statement> {
    let tagged = ROUTE.try_with(|route| with_route(sql, route));
    let sql = tagged.as_deref().unwrap_or(sql);
    c.prepare_cached(sql).await.map_err(Error::db("prepare statement"))
}

/// `sql` with a sqlcommenter comment naming `route` appended: the key `route`, its value
/// URL-encoded in single quotes (sqlcommenter's format: `/*route='%2Fhome'*/`).
pub(super) fn with_route(sql: &str, route: &str) -> String {
    let value: String = form_urlencoded::byte_serialize(route.as_bytes()).collect();
    format!("{sql} /*route='{value}'*/")
}

/// Escapes LIKE wildcards in user input (the pattern uses `\` as escape).
pub(super) fn like_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub(super) struct Book {
    pub(super) i_id: i32,
    pub(super) title: String,
    pub(super) author: String,
    pub(super) pub_date: String,
    pub(super) publisher: String,
    pub(super) subject: String,
    pub(super) desc: String,
    pub(super) thumbnail: String,
    pub(super) image: String,
    pub(super) srp: f64,
    pub(super) cost: f64,
    pub(super) avail: String,
    pub(super) isbn: String,
    pub(super) pages: i32,
    pub(super) backing: String,
    pub(super) dimensions: String,
    pub(super) stock: i32,
}

pub(super) struct CartLine {
    pub(super) i_id: i32,
    pub(super) title: String,
    pub(super) cost: f64,
    pub(super) srp: f64,
    pub(super) backing: String,
    pub(super) qty: i32,
}

pub(super) struct Address {
    pub(super) street1: String,
    pub(super) street2: String,
    pub(super) city: String,
    pub(super) state: String,
    pub(super) zip: String,
    pub(super) country: String,
}

pub(super) struct CustomerSummary {
    pub(super) c_id: i32,
    pub(super) uname: String,
    pub(super) name: String,
    pub(super) discount: f64,
    pub(super) address: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_wildcards_are_escaped() {
        assert_eq!(like_escape("a%b_c\\"), "a\\%b\\_c\\\\");
    }

    #[test]
    fn a_route_is_appended_as_a_sqlcommenter_comment() {
        assert_eq!(with_route("SELECT 1", "/best_sellers"), "SELECT 1 /*route='%2Fbest_sellers'*/");
    }

    #[tokio::test]
    async fn statements_carry_the_route_only_inside_a_tagged_interaction() {
        let outside = ROUTE.try_with(|r| with_route("SELECT 1", r)).ok();
        assert_eq!(outside, None);
        let inside = ROUTE.scope("/home", async { ROUTE.try_with(|r| with_route("SELECT 1", r)).ok() }).await;
        assert_eq!(inside.as_deref(), Some("SELECT 1 /*route='%2Fhome'*/"));
    }
}
