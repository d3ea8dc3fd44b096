//! HTML for the larger blocks of the pages: a book, a shopping cart, an order.

use super::queries::{Book, CartLine};
use crate::html::{esc, item_link, money, Page};
use tokio_postgres::Row;

impl Book {
    /// The product detail block.
    pub(super) fn render(&self, page: &mut Page) {
        page.raw(&format!(
            "<div class=\"book\" data-item-id=\"{}\">\n<p><b>{}</b> by {}</p>\n<p>{}</p>\n<table>\n\
             <tr><td>Subject</td><td>{}</td></tr><tr><td>Publisher</td><td>{}</td></tr>\n\
             <tr><td>Published</td><td>{}</td></tr><tr><td>Available</td><td>{}</td></tr>\n\
             <tr><td>ISBN</td><td>{}</td></tr><tr><td>Pages</td><td>{}</td></tr>\n\
             <tr><td>Backing</td><td>{}</td></tr><tr><td>Dimensions</td><td>{}</td></tr>\n\
             <tr><td>List price</td><td>{}</td></tr><tr><td>Our price</td><td>{}</td></tr>\n\
             <tr><td>In stock</td><td>{}</td></tr><tr><td>Image</td><td>{} ({})</td></tr>\n</table>\n</div>\n",
            self.i_id,
            esc(&self.title),
            esc(&self.author),
            esc(&self.desc),
            esc(&self.subject),
            esc(&self.publisher),
            esc(&self.pub_date),
            esc(&self.avail),
            esc(&self.isbn),
            self.pages,
            esc(&self.backing),
            esc(&self.dimensions),
            money(self.srp),
            money(self.cost),
            self.stock,
            esc(&self.image),
            esc(&self.thumbnail),
        ));
    }
}

/// The cart's lines as a form that updates quantities, and its sub-total.
/// The cart's lines as a form that updates quantities, and its sub-total.
pub(super) fn render_cart(page: &mut Page, sc_id: i32, lines: &[CartLine], discount: f64) {
    page.raw(&format!("<p data-cart-id=\"{sc_id}\">Shopping cart {sc_id}</p>\n"));
    page.raw("<form method=\"get\" action=\"/shopping_cart\">\n");
    page.table(
        &["Item", "Backing", "List price", "Our price", "Quantity"],
        lines.iter().map(|l| {
            vec![
                item_link(l.i_id, &l.title),
                esc(&l.backing),
                money(l.srp),
                money(l.cost),
                format!("<input name=\"qty_{}\" value=\"{}\" size=\"4\">", l.i_id, l.qty),
            ]
        }),
    );
    let sub: f64 = lines.iter().map(|l| l.cost * f64::from(l.qty)).sum();
    page.raw("<button type=\"submit\">Update cart</button></form>\n");
    page.p(&format!("Sub-total {} (discount {:.0}%: {})", money(sub), discount * 100.0, money(sub * (1.0 - discount))));
}

/// Order Display's order: `o` is the row of its order query (customer,
/// order, payment, billing and shipping addresses, by column position),
/// `lines` those of its order-line query.
pub(super) fn render_order(page: &mut Page, o_id: i32, o: &Row, lines: &[Row]) {
    let s = |k: usize| esc(o.get::<_, &str>(k));
    page.raw(&format!(
        "<p data-order-id=\"{o_id}\">Order {o_id} of {} {} ({}, {}), placed {}, status {}.</p>\n\
         <p>Billing: {}, {}, {} {} {}, {}</p>\n<p>Shipping ({} on {}): {}, {}, {} {} {}, {}</p>\n\
         <p>Paid by {}: sub-total {}, tax {}, total {}</p>\n",
        s(0),
        s(1),
        s(2),
        s(3),
        s(4),
        s(10),
        s(12),
        s(13),
        s(14),
        s(15),
        s(16),
        s(17),
        s(8),
        s(9),
        s(18),
        s(19),
        s(20),
        s(21),
        s(22),
        s(23),
        s(11),
        money(o.get(5)),
        money(o.get(6)),
        money(o.get(7)),
    ));
    page.table(
        &["Item", "Publisher", "Cost", "Qty", "Discount", "Comments"],
        lines.iter().map(|l| {
            vec![
                item_link(l.get(0), l.get(1)),
                esc(l.get(2)),
                money(l.get(3)),
                l.get::<_, i32>(4).to_string(),
                format!("{:.0}%", l.get::<_, f64>(5) * 100.0),
                esc(l.get(6)),
            ]
        }),
    );
}
