//! HTML rendering for the bookstore's pages: a tiny escaping builder, the
//! common page frame (header, navigation, footer) every TPC-W page carries,
//! and the link helpers. Pages are real documents of realistic size (a few
//! KB to tens of KB), without images.

use std::fmt::Write as _;

use crate::words::SUBJECTS;

/// Escapes text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes a query value.
pub fn q(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A page under construction.
pub struct Page {
    buf: String,
}

impl Page {
    /// Starts a page: doctype, head, the site banner and navigation bar.
    pub fn new(title: &str) -> Page {
        let mut buf = String::with_capacity(16 * 1024);
        let t = esc(title);
        let _ = write!(
            buf,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <title>TPC-W bookstore — {t}</title>\n\
             <style>body{{font-family:sans-serif;margin:1em 3em}}table{{border-collapse:collapse}}\
             td,th{{border:1px solid #ccc;padding:2px 6px}}nav a{{margin-right:1em}}</style>\n\
             </head>\n<body>\n<header><h1>TPC-W bookstore</h1><h2>{t}</h2></header>\n<nav>\
             <a href=\"/home\">Home</a><a href=\"/shopping_cart\">Shopping cart</a>\
             <a href=\"/search_request\">Search</a><a href=\"/order_inquiry\">Order status</a>\
             <a href=\"/customer_registration\">Register</a></nav>\n<main>\n"
        );
        Page { buf }
    }

    /// Appends pre-built HTML (callers escape their data with [`esc`]).
    pub fn raw(&mut self, html: &str) -> &mut Page {
        self.buf.push_str(html);
        self
    }

    /// A paragraph of (escaped) text.
    pub fn p(&mut self, text: &str) -> &mut Page {
        let _ = writeln!(self.buf, "<p>{}</p>", esc(text));
        self
    }

    /// A heading.
    pub fn h3(&mut self, text: &str) -> &mut Page {
        let _ = writeln!(self.buf, "<h3>{}</h3>", esc(text));
        self
    }

    /// A table with a header row; every cell is pre-built HTML.
    pub fn table<I, R>(&mut self, header: &[&str], rows: I) -> &mut Page
    where
        I: IntoIterator<Item = R>,
        R: IntoIterator<Item = String>,
    {
        self.buf.push_str("<table>\n<tr>");
        for h in header {
            let _ = write!(self.buf, "<th>{}</th>", esc(h));
        }
        self.buf.push_str("</tr>\n");
        for row in rows {
            self.buf.push_str("<tr>");
            for cell in row {
                let _ = write!(self.buf, "<td>{cell}</td>");
            }
            self.buf.push_str("</tr>\n");
        }
        self.buf.push_str("</table>\n");
        self
    }

    /// A form (GET) with text inputs; `fields` are (name, label, value).
    pub fn form(&mut self, action: &str, fields: &[(&str, &str, &str)], submit: &str) -> &mut Page {
        let _ = writeln!(self.buf, "<form method=\"get\" action=\"{}\">", esc(action));
        for (name, label, value) in fields {
            let _ = writeln!(
                self.buf,
                "<label>{}: <input name=\"{}\" value=\"{}\"></label><br>",
                esc(label),
                esc(name),
                esc(value)
            );
        }
        let _ = writeln!(self.buf, "<button type=\"submit\">{}</button></form>", esc(submit));
        self
    }

    /// The subject directory TPC-W shows on Home and Search Request: links to
    /// each subject's New Products and Best Sellers.
    pub fn subjects(&mut self) -> &mut Page {
        self.buf.push_str("<h3>Browse by subject</h3>\n<ul>\n");
        for s in SUBJECTS {
            let _ = writeln!(
                self.buf,
                "<li>{s}: <a href=\"/new_products?subject={qs}\">new</a> \
                 <a href=\"/best_sellers?subject={qs}\">best sellers</a> \
                 <a href=\"/search_results?type=subject&amp;q={qs}\">all</a></li>",
                qs = q(s)
            );
        }
        self.buf.push_str("</ul>\n");
        self
    }

    /// Finishes the page with the common footer.
    pub fn finish(mut self) -> String {
        self.buf.push_str(
            "</main>\n<footer><hr><p>TPC-W style bookstore (shortfirst example). \
             <a href=\"/home\">Home</a> · <a href=\"/search_request\">Search</a> · \
             <a href=\"/shopping_cart\">Cart</a> · <a href=\"/order_inquiry\">Orders</a></p>\
             </footer>\n</body>\n</html>\n",
        );
        self.buf
    }
}

/// A link to a product page.
pub fn item_link(i_id: i32, title: &str) -> String {
    format!("<a href=\"/product_detail?i_id={i_id}\">{}</a>", esc(title))
}

/// Money with two decimals.
pub fn money(x: f64) -> String {
    format!("${x:.2}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(esc("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
        assert_eq!(q("SCIENCE FICTION&x"), "SCIENCE+FICTION%26x");
    }

    #[test]
    fn pages_are_complete_documents() {
        let mut p = Page::new("Home <test>");
        p.p("hello & bye").subjects();
        let html = p.finish();
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.ends_with("</html>\n"));
        assert!(html.contains("Home &lt;test&gt;"));
        assert!(html.contains("hello &amp; bye"));
        assert_eq!(html.matches("/best_sellers?subject=").count(), 24);
    }
}
