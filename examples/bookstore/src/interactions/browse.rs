//! TPC-W's browsing interactions: Home, New Products, Best Sellers, Product
//! Detail, Search Request and Search Results (read-only).

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::queries::{like_escape, prep};
use super::{Reply, Request, Store, BEST_SELLERS_WINDOW};
use crate::error::{Error, Result};
use crate::html::{esc, item_link, Page};
use crate::words::digsyl;

impl Store {
    pub(super) async fn home(&self, req: &Request, rng: &mut ChaCha8Rng) -> Result<Reply> {
        let c = crate::db::get(&self.pool).await?;
        let mut page = Page::new("Home");
        if let Some(c_id) = req.session.c_id {
            let st = prep(&c, "SELECT c_fname, c_lname FROM customer WHERE c_id = $1").await?;
            match c.query_opt(&st, &[&c_id]).await.map_err(Error::db("get name"))? {
                Some(r) => page.p(&format!("Welcome back, {} {}!", r.get::<_, &str>(0), r.get::<_, &str>(1))),
                None => page.p("Welcome, new visitor!"),
            };
        } else {
            page.p("Welcome to the TPC-W bookstore!");
        }
        let promo = self.promotion(&c, rng).await?;
        page.raw(&promo).subjects();
        Ok(Reply { html: page.finish(), session: req.session })
    }

    pub(super) async fn new_products(&self, req: &Request, rng: &mut ChaCha8Rng) -> Result<Reply> {
        let subject = Self::subject_param(req, rng)?;
        let c = crate::db::get(&self.pool).await?;
        let st = prep(
            &c,
            "SELECT i_id, i_title, a_fname, a_lname, i_pub_date::text FROM item, author \
                 WHERE i_a_id = a_id AND i_subject = $1 ORDER BY i_pub_date DESC, i_title LIMIT 50",
        )
        .await?;
        let rows = c.query(&st, &[&subject]).await.map_err(Error::db("new products"))?;
        let mut page = Page::new(&format!("New products: {subject}"));
        let promo = self.promotion(&c, rng).await?;
        page.table(
            &["Title", "Author", "Published"],
            rows.iter().map(|r| {
                vec![
                    item_link(r.get(0), r.get(1)),
                    esc(&format!("{} {}", r.get::<_, &str>(2), r.get::<_, &str>(3))),
                    esc(r.get(4)),
                ]
            }),
        );
        page.raw(&promo);
        Ok(Reply { html: page.finish(), session: req.session })
    }

    pub(super) async fn best_sellers(&self, req: &Request, rng: &mut ChaCha8Rng) -> Result<Reply> {
        let subject = Self::subject_param(req, rng)?;
        let c = crate::db::get(&self.pool).await?;
        // TPC-W 2.6.3: the 50 items of the subject sold in the largest
        // quantity over the most recent 3,333 orders.
        let st = prep(
            &c,
            "SELECT i_id, i_title, a_fname, a_lname, SUM(ol_qty) AS sold \
                 FROM item, author, order_line \
                 WHERE i_id = ol_i_id AND i_a_id = a_id \
                   AND ol_o_id > (SELECT MAX(o_id) - $2 FROM orders) AND i_subject = $1 \
                 GROUP BY i_id, i_title, a_fname, a_lname ORDER BY sold DESC, i_id LIMIT 50",
        )
        .await?;
        let mut rows = Vec::new();
        // At least once; more only under `open_with`'s declared repeat (bounded there).
        for _ in 0..self.best_sellers_repeat {
            rows = c.query(&st, &[&subject, &BEST_SELLERS_WINDOW]).await.map_err(Error::db("best sellers"))?;
        }
        let mut page = Page::new(&format!("Best sellers: {subject}"));
        let promo = self.promotion(&c, rng).await?;
        page.table(
            &["Rank", "Title", "Author", "Copies sold"],
            rows.iter().enumerate().map(|(k, r)| {
                vec![
                    (k + 1).to_string(),
                    item_link(r.get(0), r.get(1)),
                    esc(&format!("{} {}", r.get::<_, &str>(2), r.get::<_, &str>(3))),
                    r.get::<_, i64>(4).to_string(),
                ]
            }),
        );
        page.raw(&promo);
        Ok(Reply { html: page.finish(), session: req.session })
    }

    pub(super) async fn product_detail(&self, req: &Request, rng: &mut ChaCha8Rng) -> Result<Reply> {
        let i_id = self.item_param(req, rng)?;
        let c = crate::db::get(&self.pool).await?;
        let b = self.book(&c, i_id).await?;
        let mut page = Page::new(&b.title);
        b.render(&mut page);
        page.raw(&format!(
            "<p><a href=\"/shopping_cart?i_id={i_id}\">Add to cart</a> · \
             <a href=\"/admin_request?i_id={i_id}\">Update this item</a></p>\n"
        ));
        Ok(Reply { html: page.finish(), session: req.session })
    }

    pub(super) async fn search_request(&self, req: &Request, rng: &mut ChaCha8Rng) -> Result<Reply> {
        let c = crate::db::get(&self.pool).await?;
        let promo = self.promotion(&c, rng).await?;
        let mut page = Page::new("Search");
        page.raw(
            "<form method=\"get\" action=\"/search_results\">\n<select name=\"type\">\
             <option value=\"author\">Author</option><option value=\"title\">Title</option>\
             <option value=\"subject\">Subject</option></select>\n\
             <input name=\"q\"> <button type=\"submit\">Search</button></form>\n",
        );
        page.raw(&promo).subjects();
        Ok(Reply { html: page.finish(), session: req.session })
    }

    pub(super) async fn search_results(&self, req: &Request, rng: &mut ChaCha8Rng) -> Result<Reply> {
        let kind = match req.str("type") {
            Some(t) => t.to_ascii_lowercase(),
            None => ["author", "title", "subject"].choose(rng).copied().unwrap_or("title").to_string(),
        };
        let (sql, term): (&str, String) = match kind.as_str() {
            "author" => (
                "SELECT i_id, i_title, a_fname, a_lname FROM author, item \
                 WHERE a_lname LIKE $1 ESCAPE '\\' AND i_a_id = a_id ORDER BY i_title, i_id LIMIT 50",
                format!("{}%", like_escape(&self.search_term(req, rng, self.authors))),
            ),
            "title" => (
                "SELECT i_id, i_title, a_fname, a_lname FROM item, author \
                 WHERE i_title LIKE $1 ESCAPE '\\' AND i_a_id = a_id ORDER BY i_title, i_id LIMIT 50",
                format!("%{}%", like_escape(&self.search_term(req, rng, self.items))),
            ),
            "subject" => (
                "SELECT i_id, i_title, a_fname, a_lname FROM item, author \
                 WHERE i_subject = $1 AND i_a_id = a_id ORDER BY i_title, i_id LIMIT 50",
                match req.str("q") {
                    Some(_) => {
                        let mut r = req.clone();
                        r.params.insert("subject".into(), req.params["q"].clone());
                        Self::subject_param(&r, rng)?.to_string()
                    }
                    None => Self::subject_param(req, rng)?.to_string(),
                },
            ),
            other => {
                return Err(Error::BadRequest(format!("search type must be author, title or subject, got '{other}'")))
            }
        };
        let c = crate::db::get(&self.pool).await?;
        let st = prep(&c, sql).await?;
        let rows = c.query(&st, &[&term]).await.map_err(Error::db("search"))?;
        let promo = self.promotion(&c, rng).await?;
        let mut page = Page::new("Search results");
        page.p(&format!("{} results for {kind} '{term}'", rows.len()));
        page.table(
            &["Title", "Author"],
            rows.iter().map(|r| {
                vec![item_link(r.get(0), r.get(1)), esc(&format!("{} {}", r.get::<_, &str>(2), r.get::<_, &str>(3)))]
            }),
        );
        page.raw(&promo);
        Ok(Reply { html: page.finish(), session: req.session })
    }

    /// The search string: given, or DigSyl of a random number as TPC-W's
    /// browser emulator draws it (author names and titles contain DigSyl
    /// strings, so such searches find rows).
    fn search_term(&self, req: &Request, rng: &mut ChaCha8Rng, range: i32) -> String {
        match req.str("q") {
            Some(q) => q.to_string(),
            None => digsyl(rng.gen_range(1..=range.max(1)) as u64),
        }
    }
}
