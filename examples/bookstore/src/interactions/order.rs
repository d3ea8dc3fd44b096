//! TPC-W's ordering interactions: Shopping Cart, Customer Registration, Buy
//! Request, Buy Confirm, Order Inquiry and Order Display. The writes run in
//! one transaction each.

use deadpool_postgres::GenericClient;
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::queries::{is_date_error, prep, Address, CartLine, CustomerSummary};
use super::render::{render_cart, render_order};
use super::{Reply, Request, Session, Store, NEW_CUSTOMER_PROBABILITY};
use crate::error::{Error, Result};
use crate::html::{money, Page};
use crate::words::{self, digsyl};

impl Store {
    pub(super) async fn shopping_cart(&self, req: &Request, rng: &mut ChaCha8Rng) -> Result<Reply> {
        let add = req.int("i_id")?;
        let mut quantities = Vec::new();
        for (k, v) in &req.params {
            if let Some(id) = k.strip_prefix("qty_") {
                let i_id: i32 = id.parse().map_err(|_| Error::BadRequest(format!("bad quantity parameter '{k}'")))?;
                let qty: i32 = v
                    .parse()
                    .ok()
                    .filter(|q| (0..=10_000).contains(q))
                    .ok_or_else(|| Error::BadRequest(format!("'{k}' must be 0..=10000, got '{v}'")))?;
                quantities.push((i_id, qty));
            }
        }
        quantities.sort_unstable();
        let mut c = crate::db::get(&self.pool).await?;
        let tx = c.transaction().await.map_err(Error::db("begin shopping cart"))?;
        let (sc_id, lines) = self.update_cart(&tx, req.session, add, &quantities, rng).await?;
        let promo = self.promotion(&tx, rng).await?;
        tx.commit().await.map_err(Error::db("commit shopping cart"))?;
        let mut page = Page::new("Shopping cart");
        render_cart(&mut page, sc_id, &lines, 0.0);
        page.raw("<p><a href=\"/customer_registration\">Check out</a></p>\n").raw(&promo);
        Ok(Reply { html: page.finish(), session: Session { sc_id: Some(sc_id), ..req.session } })
    }

    pub(super) fn customer_registration(&self, req: &Request) -> Reply {
        // TPC-W: a form only, no database access.
        let mut page = Page::new("Customer registration");
        page.h3("Returning customer");
        page.form("/buy_request", &[("uname", "User name", ""), ("passwd", "Password", "")], "Log in");
        page.h3("New customer");
        page.raw("<form method=\"get\" action=\"/buy_request\"><input type=\"hidden\" name=\"new\" value=\"1\">\n");
        for (name, label) in [
            ("fname", "First name"),
            ("lname", "Last name"),
            ("street1", "Street"),
            ("street2", "Street (2)"),
            ("city", "City"),
            ("state", "State"),
            ("zip", "Zip"),
            ("country", "Country"),
            ("phone", "Phone"),
            ("email", "E-mail"),
            ("birthdate", "Birth date"),
            ("data", "About you"),
        ] {
            page.raw(&format!("<label>{label}: <input name=\"{name}\"></label><br>\n"));
        }
        page.raw("<button type=\"submit\">Register</button></form>\n");
        Reply { html: page.finish(), session: req.session }
    }

    pub(super) async fn buy_request(&self, req: &Request, rng: &mut ChaCha8Rng) -> Result<Reply> {
        let new_customer = if req.flag("new") {
            true
        } else if req.str("uname").is_some() {
            false
        } else {
            rng.gen_bool(NEW_CUSTOMER_PROBABILITY)
        };
        let mut c = crate::db::get(&self.pool).await?;
        let tx = c.transaction().await.map_err(Error::db("begin buy request"))?;
        let customer = if new_customer {
            self.register(&tx, req, rng).await?
        } else {
            let (uname, passwd) = self.credentials(req, rng);
            let st = prep(
                &tx,
                "SELECT c_id, c_passwd, c_fname, c_lname, c_discount::float8, addr_street1, \
                     addr_city, addr_zip, co_name FROM customer, address, country \
                     WHERE c_addr_id = addr_id AND addr_co_id = co_id AND c_uname = $1",
            )
            .await?;
            let r = tx
                .query_opt(&st, &[&uname])
                .await
                .map_err(Error::db("get customer"))?
                .ok_or_else(|| Error::NotFound(format!("customer '{uname}'")))?;
            if r.get::<_, &str>(1) != passwd {
                return Err(Error::BadRequest(format!("wrong password for '{uname}'")));
            }
            let c_id: i32 = r.get(0);
            let st = prep(
                &tx,
                "UPDATE customer SET c_login = now(), c_expiration = now() + interval '2 hours' \
                     WHERE c_id = $1",
            )
            .await?;
            tx.execute(&st, &[&c_id]).await.map_err(Error::db("refresh session"))?;
            CustomerSummary {
                c_id,
                uname,
                name: format!("{} {}", r.get::<_, &str>(2), r.get::<_, &str>(3)),
                discount: r.get(4),
                address: format!(
                    "{}, {} {}, {}",
                    r.get::<_, &str>(5),
                    r.get::<_, &str>(6),
                    r.get::<_, &str>(7),
                    r.get::<_, &str>(8)
                ),
            }
        };
        let (sc_id, lines) = self.update_cart(&tx, req.session, None, &[], rng).await?;
        tx.commit().await.map_err(Error::db("commit buy request"))?;
        let mut page = Page::new("Buy request");
        page.p(&format!("Customer {} ({}), shipping to {}", customer.name, customer.uname, customer.address));
        render_cart(&mut page, sc_id, &lines, customer.discount);
        page.raw("<form method=\"get\" action=\"/buy_confirm\">\n<select name=\"cc_type\">");
        for t in words::CC_TYPES {
            page.raw(&format!("<option>{t}</option>"));
        }
        page.raw("</select>\n<select name=\"ship_type\">");
        for t in words::SHIP_TYPES {
            page.raw(&format!("<option>{t}</option>"));
        }
        page.raw(
            "</select>\n<label>Card number: <input name=\"cc_number\"></label>\n\
             <label>Name on card: <input name=\"cc_name\"></label>\n\
             <label>Expiry: <input name=\"cc_expiry\"></label>\n\
             <button type=\"submit\">Buy</button></form>\n",
        );
        Ok(Reply { html: page.finish(), session: Session { sc_id: Some(sc_id), c_id: Some(customer.c_id) } })
    }

    /// TPC-W createNewCustomer, inside the Buy Request transaction.
    async fn register<C: GenericClient>(&self, c: &C, req: &Request, rng: &mut ChaCha8Rng) -> Result<CustomerSummary> {
        let mut field = |name: &str, min: usize, max: usize| -> String {
            match req.str(name) {
                Some(v) => v.chars().take(max).collect(),
                None => words::astring(rng, min, max),
            }
        };
        let fname = field("fname", 8, 15);
        let lname = field("lname", 8, 15);
        let addr = Address {
            street1: field("street1", 15, 40),
            street2: field("street2", 15, 40),
            city: field("city", 4, 30),
            state: field("state", 2, 20),
            zip: field("zip", 5, 10),
            country: String::new(),
        };
        let phone = field("phone", 9, 16);
        let data = field("data", 100, 500);
        let country = match req.str("country") {
            Some(c) => c.to_string(),
            None => words::COUNTRIES.choose(rng).copied().unwrap_or("United States").to_string(),
        };
        let addr = Address { country, ..addr };
        let birthdate = match req.str("birthdate") {
            Some(b) => b.to_string(),
            None => words::date_string(words::EPOCH_DAYS - rng.gen_range(365 * 18..365 * 100)),
        };
        let discount: f64 = f64::from(rng.gen_range(0..=50)) / 100.0;
        let addr_id = self.enter_address(c, &addr).await?;
        let st = prep(c, "SELECT nextval('customer_seq')::int").await?;
        let c_id: i32 = c.query_one(&st, &[]).await.map_err(Error::db("next customer id"))?.get(0);
        let uname = digsyl(c_id as u64);
        let passwd = uname.to_lowercase();
        let email = format!("{uname}@{fname}.com");
        let st = prep(
            c,
            "INSERT INTO customer (c_id, c_uname, c_passwd, c_fname, c_lname, c_addr_id, \
                 c_phone, c_email, c_since, c_last_login, c_login, c_expiration, c_discount, \
                 c_balance, c_ytd_pmt, c_birthdate, c_data) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CURRENT_DATE, CURRENT_DATE, now(), \
                 now() + interval '2 hours', $9::float8, 0, 0, $10::text::date, $11)",
        )
        .await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 11] =
            [&c_id, &uname, &passwd, &fname, &lname, &addr_id, &phone, &email, &discount, &birthdate, &data];
        c.execute(&st, &params).await.map_err(|e| match Error::db("insert customer")(e) {
            Error::Db { source, .. } if is_date_error(&source) => {
                Error::BadRequest(format!("birthdate must be YYYY-MM-DD, got '{birthdate}'"))
            }
            other => other,
        })?;
        Ok(CustomerSummary {
            c_id,
            uname,
            name: format!("{fname} {lname}"),
            discount,
            address: format!("{}, {} {}, {}", addr.street1, addr.city, addr.zip, addr.country),
        })
    }

    pub(super) async fn buy_confirm(&self, req: &Request, rng: &mut ChaCha8Rng) -> Result<Reply> {
        let c_id = req.session.c_id.unwrap_or_else(|| rng.gen_range(1..=self.customers));
        let pay = Payment::from_request(req, rng)?;
        let ship_addr = req.str("street1").map(|s1| Address {
            street1: s1.to_string(),
            street2: req.str("street2").unwrap_or("").to_string(),
            city: req.str("city").unwrap_or("").to_string(),
            state: req.str("state").unwrap_or("").to_string(),
            zip: req.str("zip").unwrap_or("").to_string(),
            country: req.str("country").unwrap_or("United States").to_string(),
        });

        let mut c = crate::db::get(&self.pool).await?;
        let tx = c.transaction().await.map_err(Error::db("begin buy confirm"))?;
        let o = self.confirm(&tx, c_id, &pay, ship_addr.as_ref(), req.session, rng).await?;
        tx.commit().await.map_err(Error::db("commit buy confirm"))?;

        let (o_id, sc_id) = (o.o_id, o.sc_id);
        let mut page = Page::new("Order confirmed");
        page.p(&format!("Thank you, {}. Your order number is {o_id}.", o.name));
        render_cart(&mut page, sc_id, &o.lines, o.discount);
        page.p(&format!(
            "Sub-total {}, tax {}, shipping {} ({}), total {} charged to {}.",
            money(o.sub_total),
            money(o.tax),
            money(o.ship_cost),
            pay.ship_type,
            money(o.total),
            pay.cc_type,
        ));
        page.raw(&format!("<p data-order-id=\"{o_id}\"><a href=\"/order_inquiry\">Track your order</a></p>\n"));
        Ok(Reply { html: page.finish(), session: Session { sc_id: Some(sc_id), c_id: Some(c_id) } })
    }

    /// TPC-W doBuyConfirm, all inside `tx`: the customer's discount and
    /// billing address, the shipping address, the cart (an empty cart of an
    /// explicit session is refused; without one, a random item is bought),
    /// the order, its lines with the stock taken, the card transaction, and
    /// the cart emptied.
    async fn confirm<C: GenericClient>(
        &self,
        tx: &C,
        c_id: i32,
        pay: &Payment,
        ship_addr: Option<&Address>,
        session: Session,
        rng: &mut ChaCha8Rng,
    ) -> Result<Confirmed> {
        let explicit_cart = session.sc_id.is_some();
        let st =
            prep(tx, "SELECT c_discount::float8, c_addr_id, c_fname, c_lname FROM customer WHERE c_id = $1").await?;
        let r = tx
            .query_opt(&st, &[&c_id])
            .await
            .map_err(Error::db("get customer"))?
            .ok_or_else(|| Error::NotFound(format!("customer {c_id}")))?;
        let discount: f64 = r.get(0);
        let bill_addr: i32 = r.get(1);
        let name = format!("{} {}", r.get::<_, &str>(2), r.get::<_, &str>(3));
        let ship_addr_id = match ship_addr {
            Some(a) => self.enter_address(tx, a).await?,
            None => bill_addr,
        };
        let (sc_id, _) = self.cart(tx, session).await?;
        let mut lines = self.cart_lines(tx, sc_id).await?;
        if lines.is_empty() {
            if explicit_cart {
                return Err(Error::BadRequest(format!("shopping cart {sc_id} is empty")));
            }
            // A browser without a session buys one random item, as if it had
            // just put it in a fresh cart.
            self.add_to_cart(tx, sc_id, rng.gen_range(1..=self.items)).await?;
            lines = self.cart_lines(tx, sc_id).await?;
        }
        let sub_total: f64 = lines.iter().map(|l| l.cost * f64::from(l.qty)).sum::<f64>() * (1.0 - discount);
        let tax = sub_total * 0.0825;
        let ship_cost = 3.0 + lines.iter().map(|l| f64::from(l.qty)).sum::<f64>();
        let total = sub_total + tax + ship_cost;
        let st = prep(
            tx,
            "INSERT INTO orders (o_id, o_c_id, o_date, o_sub_total, o_tax, o_total, o_ship_type, \
                 o_ship_date, o_bill_addr_id, o_ship_addr_id, o_status) \
                 VALUES (nextval('orders_seq'), $1, now(), $2::float8, $3::float8, $4::float8, $5, \
                 now() + make_interval(days => $6), $7, $8, 'PENDING') RETURNING o_id",
        )
        .await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] =
            [&c_id, &sub_total, &tax, &total, &pay.ship_type, &pay.ship_days, &bill_addr, &ship_addr_id];
        let o_id: i32 = tx.query_one(&st, &params).await.map_err(Error::db("insert order"))?.get(0);
        insert_order_lines(tx, o_id, &lines, discount, rng).await?;
        insert_card_transaction(tx, o_id, pay, total, ship_addr_id).await?;
        let st = prep(tx, "DELETE FROM shopping_cart_line WHERE scl_sc_id = $1").await?;
        tx.execute(&st, &[&sc_id]).await.map_err(Error::db("clear cart"))?;
        Ok(Confirmed { o_id, name, sc_id, lines, discount, sub_total, tax, ship_cost, total })
    }

    pub(super) fn order_inquiry(&self, req: &Request) -> Reply {
        // TPC-W: the one interaction without database access.
        let mut page = Page::new("Order inquiry");
        page.p("Enter your user name and password to see your most recent order.");
        page.form("/order_display", &[("uname", "User name", ""), ("passwd", "Password", "")], "Show order");
        Reply { html: page.finish(), session: req.session }
    }

    pub(super) async fn order_display(&self, req: &Request, rng: &mut ChaCha8Rng) -> Result<Reply> {
        let (uname, passwd) = self.credentials(req, rng);
        let c = crate::db::get(&self.pool).await?;
        let st = prep(&c, "SELECT c_passwd FROM customer WHERE c_uname = $1").await?;
        let stored: String = c
            .query_opt(&st, &[&uname])
            .await
            .map_err(Error::db("get password"))?
            .ok_or_else(|| Error::NotFound(format!("customer '{uname}'")))?
            .get(0);
        if stored != passwd {
            return Err(Error::BadRequest(format!("wrong password for '{uname}'")));
        }
        let st = prep(
            &c,
            "SELECT o_id FROM customer, orders WHERE c_id = o_c_id AND c_uname = $1 \
                 ORDER BY o_date DESC, o_id DESC LIMIT 1",
        )
        .await?;
        let mut page = Page::new("Order display");
        let Some(r) = c.query_opt(&st, &[&uname]).await.map_err(Error::db("most recent order"))? else {
            page.p(&format!("Customer {uname} has not placed any order yet."));
            page.form("/order_display", &[("uname", "User name", &uname), ("passwd", "Password", "")], "Show order");
            return Ok(Reply { html: page.finish(), session: req.session });
        };
        let o_id: i32 = r.get(0);
        let st = prep(
            &c,
            "SELECT c_fname, c_lname, c_phone, c_email, o_date::text, o_sub_total::float8, \
                 o_tax::float8, o_total::float8, o_ship_type, o_ship_date::text, o_status, cx_type, \
                 b.addr_street1, b.addr_street2, b.addr_city, b.addr_state, b.addr_zip, bc.co_name, \
                 s.addr_street1, s.addr_street2, s.addr_city, s.addr_state, s.addr_zip, sc.co_name \
                 FROM orders, customer, cc_xacts, address b, country bc, address s, country sc \
                 WHERE o_id = $1 AND cx_o_id = o_id AND o_c_id = c_id \
                   AND o_bill_addr_id = b.addr_id AND b.addr_co_id = bc.co_id \
                   AND o_ship_addr_id = s.addr_id AND s.addr_co_id = sc.co_id",
        )
        .await?;
        let o = c
            .query_opt(&st, &[&o_id])
            .await
            .map_err(Error::db("get order"))?
            .ok_or_else(|| Error::NotFound(format!("order {o_id}")))?;
        let st = prep(
            &c,
            "SELECT ol_i_id, i_title, i_publisher, i_cost::float8, ol_qty, ol_discount::float8, \
                 ol_comments FROM order_line, item WHERE ol_i_id = i_id AND ol_o_id = $1 ORDER BY ol_id",
        )
        .await?;
        let lines = c.query(&st, &[&o_id]).await.map_err(Error::db("get order lines"))?;
        render_order(&mut page, o_id, &o, &lines);
        Ok(Reply { html: page.finish(), session: req.session })
    }
}

/// Buy Confirm's payment and shipping fields: given, or drawn the way TPC-W's
/// browser emulator fills them in (in this order, from the request's random
/// stream).
struct Payment {
    cc_type: String,
    cc_number: String,
    cc_name: String,
    cc_expiry: String,
    ship_type: String,
    ship_days: i32,
    auth_id: String,
}

impl Payment {
    fn from_request(req: &Request, rng: &mut ChaCha8Rng) -> Result<Payment> {
        let cc_type = req
            .str("cc_type")
            .map(str::to_string)
            .unwrap_or_else(|| words::CC_TYPES.choose(rng).copied().unwrap_or("VISA").to_string());
        let cc_number = req.str("cc_number").map(str::to_string).unwrap_or_else(|| words::nstring(rng, 16));
        let cc_name = req
            .str("cc_name")
            .map(str::to_string)
            .unwrap_or_else(|| format!("{} {}", words::astring(rng, 5, 15), words::astring(rng, 5, 15)));
        let cc_expiry = req
            .str("cc_expiry")
            .map(str::to_string)
            .unwrap_or_else(|| words::date_string(words::EPOCH_DAYS + rng.gen_range(10..=730)));
        let ship_type = req
            .str("ship_type")
            .map(str::to_string)
            .unwrap_or_else(|| words::SHIP_TYPES.choose(rng).copied().unwrap_or("AIR").to_string());
        let ship_days: i32 = rng.gen_range(1..=7);
        let auth_id = words::astring(rng, 15, 15);
        if cc_number.len() > 20 || cc_name.len() > 31 || ship_type.len() > 10 || cc_type.len() > 10 {
            return Err(Error::BadRequest("credit card or shipping field too long".into()));
        }
        Ok(Payment { cc_type, cc_number, cc_name, cc_expiry, ship_type, ship_days, auth_id })
    }
}

/// A placed order, for the Buy Confirm page.
struct Confirmed {
    o_id: i32,
    name: String,
    sc_id: i32,
    lines: Vec<CartLine>,
    discount: f64,
    sub_total: f64,
    tax: f64,
    ship_cost: f64,
    total: f64,
}

/// The order's lines, one per cart line, each taking its quantity from stock
/// (TPC-W: restocking by 21 when fewer than 10 would remain).
async fn insert_order_lines<C: GenericClient>(
    tx: &C,
    o_id: i32,
    lines: &[CartLine],
    discount: f64,
    rng: &mut ChaCha8Rng,
) -> Result<()> {
    let ins_line = prep(
        tx,
        "INSERT INTO order_line (ol_id, ol_o_id, ol_i_id, ol_qty, ol_discount, ol_comments) \
             VALUES ($1, $2, $3, $4, $5::float8, $6)",
    )
    .await?;
    // TPC-W: take the quantity from stock, restocking by 21 when fewer
    // than 10 would remain.
    let stock = prep(
        tx,
        "UPDATE item SET i_stock = CASE WHEN i_stock - $2 >= 10 THEN i_stock - $2 \
             ELSE i_stock - $2 + 21 END WHERE i_id = $1",
    )
    .await?;
    for (k, l) in lines.iter().enumerate() {
        let ol_id = k as i32 + 1;
        let comment = words::text(rng, 20, 100);
        tx.execute(&ins_line, &[&ol_id, &o_id, &l.i_id, &l.qty, &discount, &comment])
            .await
            .map_err(Error::db("insert order line"))?;
        tx.execute(&stock, &[&l.i_id, &l.qty]).await.map_err(Error::db("update stock"))?;
    }
    Ok(())
}

/// The order's credit card transaction, in the shipping address's country; a
/// malformed expiry date is the client's error, named.
async fn insert_card_transaction<C: GenericClient>(
    tx: &C,
    o_id: i32,
    pay: &Payment,
    total: f64,
    ship_addr_id: i32,
) -> Result<()> {
    let st = prep(
        tx,
        "INSERT INTO cc_xacts (cx_o_id, cx_type, cx_num, cx_name, cx_expire, cx_auth_id, \
             cx_xact_amt, cx_xact_date, cx_co_id) \
             SELECT $1, $2, $3, $4, $5::text::date, $6, $7::float8, now(), addr_co_id \
             FROM address WHERE addr_id = $8",
    )
    .await?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] =
        [&o_id, &pay.cc_type, &pay.cc_number, &pay.cc_name, &pay.cc_expiry, &pay.auth_id, &total, &ship_addr_id];
    tx.execute(&st, &params).await.map_err(|e| match Error::db("credit card transaction")(e) {
        Error::Db { source, .. } if is_date_error(&source) => {
            Error::BadRequest(format!("cc_expiry must be YYYY-MM-DD, got '{}'", pay.cc_expiry))
        }
        other => other,
    })?;
    Ok(())
}
