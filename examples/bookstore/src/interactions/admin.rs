//! TPC-W's administrative interactions: Admin Request (the item's update
//! form) and Admin Confirm (the update, with related items recomputed).

use deadpool_postgres::GenericClient;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::queries::prep;
use super::{Reply, Request, Store, RELATED_WINDOW};
use crate::error::{Error, Result};
use crate::html::Page;

impl Store {
    pub(super) async fn admin_request(&self, req: &Request, rng: &mut ChaCha8Rng) -> Result<Reply> {
        let i_id = self.item_param(req, rng)?;
        let c = crate::db::get(&self.pool).await?;
        let b = self.book(&c, i_id).await?;
        let mut page = Page::new(&format!("Update: {}", b.title));
        b.render(&mut page);
        let cost = format!("{:.2}", b.cost);
        page.form(
            "/admin_confirm",
            &[
                ("i_id", "Item", &i_id.to_string()),
                ("cost", "New cost", &cost),
                ("image", "Image", &b.image),
                ("thumbnail", "Thumbnail", &b.thumbnail),
            ],
            "Update",
        );
        Ok(Reply { html: page.finish(), session: req.session })
    }

    pub(super) async fn admin_confirm(&self, req: &Request, rng: &mut ChaCha8Rng) -> Result<Reply> {
        let i_id = self.item_param(req, rng)?;
        let cost = match req.float("cost")? {
            Some(c) if (0.0..1e13).contains(&c) => c,
            Some(c) => return Err(Error::BadRequest(format!("cost must be 0..1e13, got {c}"))),
            None => f64::from(rng.gen_range(100..=999_999)) / 100.0,
        };
        let image =
            req.str("image").map(str::to_string).unwrap_or_else(|| format!("img{}/image_{i_id}.gif", i_id % 100));
        let thumbnail =
            req.str("thumbnail").map(str::to_string).unwrap_or_else(|| format!("img{}/thumb_{i_id}.gif", i_id % 100));
        if image.len() > 40 || thumbnail.len() > 40 {
            return Err(Error::BadRequest("image and thumbnail names are at most 40 characters".into()));
        }
        let mut c = crate::db::get(&self.pool).await?;
        let tx = c.transaction().await.map_err(Error::db("begin admin confirm"))?;
        // TPC-W adminUpdate: new cost, images and publication date …
        let st = prep(
            &tx,
            "UPDATE item SET i_cost = $2::float8, i_image = $3, i_thumbnail = $4, \
                 i_pub_date = CURRENT_DATE WHERE i_id = $1",
        )
        .await?;
        if tx.execute(&st, &[&i_id, &cost, &image, &thumbnail]).await.map_err(Error::db("admin update"))? == 0 {
            return Err(Error::NotFound(format!("item {i_id}")));
        }
        // … and related items recomputed.
        let related = related_items(&tx, i_id).await?;
        let st = prep(
            &tx,
            "UPDATE item SET i_related1 = $2, i_related2 = $3, i_related3 = $4, i_related4 = $5, \
                 i_related5 = $6 WHERE i_id = $1",
        )
        .await?;
        tx.execute(&st, &[&i_id, &related[0], &related[1], &related[2], &related[3], &related[4]])
            .await
            .map_err(Error::db("update related"))?;
        let b = self.book(&tx, i_id).await?;
        tx.commit().await.map_err(Error::db("commit admin confirm"))?;
        let mut page = Page::new(&format!("Updated: {}", b.title));
        b.render(&mut page);
        page.p(&format!("Related items now: {}", related.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")));
        Ok(Reply { html: page.finish(), session: req.session })
    }
}

/// The five items bought most by the customers who bought `i_id` in the most
/// recent [`RELATED_WINDOW`] orders; with too little history, the item's
/// current relations fill the rest.
async fn related_items<C: GenericClient>(tx: &C, i_id: i32) -> Result<Vec<i32>> {
    let st = prep(
        tx,
        "SELECT ol_i_id FROM orders, order_line \
             WHERE o_id = ol_o_id AND ol_i_id <> $1 AND o_c_id IN ( \
               SELECT o_c_id FROM orders, order_line \
               WHERE o_id = ol_o_id AND o_id > (SELECT MAX(o_id) - $2 FROM orders) \
                 AND ol_i_id = $1) \
             GROUP BY ol_i_id ORDER BY SUM(ol_qty) DESC, ol_i_id LIMIT 5",
    )
    .await?;
    let rows = tx.query(&st, &[&i_id, &RELATED_WINDOW]).await.map_err(Error::db("related items"))?;
    let mut related: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    if related.len() < 5 {
        // Too little history: keep the current relations for the rest.
        let st =
            prep(tx, "SELECT i_related1, i_related2, i_related3, i_related4, i_related5 FROM item WHERE i_id = $1")
                .await?;
        let r = tx.query_one(&st, &[&i_id]).await.map_err(Error::db("current related"))?;
        for k in 0..5 {
            let old: i32 = r.get(k);
            if related.len() < 5 && !related.contains(&old) {
                related.push(old);
            }
        }
        while related.len() < 5 {
            related.push(related[0]);
        }
    }
    Ok(related)
}
