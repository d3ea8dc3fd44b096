//! What goes into an interaction and what comes out: which of the 14
//! interactions ([`Interaction`]), its decoded parameters and session
//! ([`Request`], [`Session`]), and the page plus session to keep ([`Reply`]).

use std::collections::HashMap;

use crate::error::{Error, Result};

/// One of TPC-W's 14 interactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Interaction {
    Home,
    NewProducts,
    BestSellers,
    ProductDetail,
    SearchRequest,
    SearchResults,
    ShoppingCart,
    CustomerRegistration,
    BuyRequest,
    BuyConfirm,
    OrderInquiry,
    OrderDisplay,
    AdminRequest,
    AdminConfirm,
}

impl Interaction {
    pub const ALL: [Interaction; 14] = [
        Interaction::Home,
        Interaction::NewProducts,
        Interaction::BestSellers,
        Interaction::ProductDetail,
        Interaction::SearchRequest,
        Interaction::SearchResults,
        Interaction::ShoppingCart,
        Interaction::CustomerRegistration,
        Interaction::BuyRequest,
        Interaction::BuyConfirm,
        Interaction::OrderInquiry,
        Interaction::OrderDisplay,
        Interaction::AdminRequest,
        Interaction::AdminConfirm,
    ];

    /// The page code of `tpcw-interactions.csv` / `tpcw-shopping-mix.csv`.
    pub fn code(self) -> &'static str {
        match self {
            Interaction::Home => "HOME",
            Interaction::NewProducts => "NEWP",
            Interaction::BestSellers => "BESS",
            Interaction::ProductDetail => "PROD",
            Interaction::SearchRequest => "SREQ",
            Interaction::SearchResults => "SRES",
            Interaction::ShoppingCart => "SHOP",
            Interaction::CustomerRegistration => "CREG",
            Interaction::BuyRequest => "BUYR",
            Interaction::BuyConfirm => "BUYC",
            Interaction::OrderInquiry => "ORDI",
            Interaction::OrderDisplay => "ORDD",
            Interaction::AdminRequest => "ADMR",
            Interaction::AdminConfirm => "ADMC",
        }
    }

    /// The interaction's name in the TPC-W specification.
    pub fn name(self) -> &'static str {
        match self {
            Interaction::Home => "Home",
            Interaction::NewProducts => "New Products",
            Interaction::BestSellers => "Best Sellers",
            Interaction::ProductDetail => "Product Detail",
            Interaction::SearchRequest => "Search Request",
            Interaction::SearchResults => "Search Results",
            Interaction::ShoppingCart => "Shopping Cart",
            Interaction::CustomerRegistration => "Customer Registration",
            Interaction::BuyRequest => "Buy Request",
            Interaction::BuyConfirm => "Buy Confirm",
            Interaction::OrderInquiry => "Order Inquiry",
            Interaction::OrderDisplay => "Order Display",
            Interaction::AdminRequest => "Admin Request",
            Interaction::AdminConfirm => "Admin Confirm",
        }
    }

    /// The URL path the server answers it on.
    pub fn path(self) -> &'static str {
        match self {
            Interaction::Home => "/home",
            Interaction::NewProducts => "/new_products",
            Interaction::BestSellers => "/best_sellers",
            Interaction::ProductDetail => "/product_detail",
            Interaction::SearchRequest => "/search_request",
            Interaction::SearchResults => "/search_results",
            Interaction::ShoppingCart => "/shopping_cart",
            Interaction::CustomerRegistration => "/customer_registration",
            Interaction::BuyRequest => "/buy_request",
            Interaction::BuyConfirm => "/buy_confirm",
            Interaction::OrderInquiry => "/order_inquiry",
            Interaction::OrderDisplay => "/order_display",
            Interaction::AdminRequest => "/admin_request",
            Interaction::AdminConfirm => "/admin_confirm",
        }
    }

    /// The row name in the Gatekeeper paper's Table 1, which names two
    /// interactions differently and omits Customer Registration.
    pub fn paper_name(self) -> Option<&'static str> {
        match self {
            Interaction::SearchResults => Some("Execute Search"),
            Interaction::AdminConfirm => Some("Admin Response"),
            Interaction::CustomerRegistration => None,
            other => Some(other.name()),
        }
    }

    pub fn from_path(path: &str) -> Option<Interaction> {
        if path == "/" {
            return Some(Interaction::Home);
        }
        Interaction::ALL.into_iter().find(|i| i.path() == path)
    }

    pub fn from_code(code: &str) -> Option<Interaction> {
        Interaction::ALL.into_iter().find(|i| i.code().eq_ignore_ascii_case(code))
    }
}

/// Session state carried between pages (TPC-W's SHOPPING_ID and C_ID).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Session {
    pub sc_id: Option<i32>,
    pub c_id: Option<i32>,
}

/// One request to an interaction: decoded query/form parameters and the
/// session (from cookies; a parameter of the same name wins).
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub params: HashMap<String, String>,
    pub session: Session,
}

impl Request {
    /// Builds a request from `(name, value)` pairs and cookie values.
    pub fn new<I, K, V>(params: I, session: Session) -> Result<Request>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let params: HashMap<String, String> = params.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        let mut r = Request { params, session };
        if let Some(sc) = r.int("sc_id")? {
            r.session.sc_id = Some(sc);
        }
        if let Some(c) = r.int("c_id")? {
            r.session.c_id = Some(c);
        }
        Ok(r)
    }

    pub(super) fn str(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str).filter(|s| !s.is_empty())
    }

    pub(super) fn int(&self, name: &str) -> Result<Option<i32>> {
        match self.str(name) {
            None => Ok(None),
            Some(s) => s
                .trim()
                .parse::<i32>()
                .map(Some)
                .map_err(|_| Error::BadRequest(format!("parameter '{name}' must be an integer, got '{s}'"))),
        }
    }

    pub(super) fn float(&self, name: &str) -> Result<Option<f64>> {
        match self.str(name) {
            None => Ok(None),
            Some(s) => match s.trim().parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(Some(v)),
                _ => Err(Error::BadRequest(format!("parameter '{name}' must be a number, got '{s}'"))),
            },
        }
    }

    pub(super) fn flag(&self, name: &str) -> bool {
        matches!(self.str(name), Some("1" | "y" | "Y" | "yes" | "true" | "on"))
    }
}

/// A rendered page and the session the browser should keep.
#[derive(Debug, Clone)]
pub struct Reply {
    pub html: String,
    pub session: Session,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_paths_and_names_round_trip() {
        for i in Interaction::ALL {
            assert_eq!(Interaction::from_path(i.path()), Some(i));
            assert_eq!(Interaction::from_code(i.code()), Some(i));
        }
        assert_eq!(Interaction::from_path("/"), Some(Interaction::Home));
        assert_eq!(Interaction::from_path("/nope"), None);
        assert_eq!(Interaction::AdminConfirm.paper_name(), Some("Admin Response"));
    }

    #[test]
    fn request_parameters_are_validated() {
        let r = Request::new([("i_id", "12"), ("sc_id", "5")], Session::default()).unwrap();
        assert_eq!(r.int("i_id").unwrap(), Some(12));
        assert_eq!(r.session.sc_id, Some(5));
        let err = Request::new([("c_id", "x")], Session::default()).unwrap_err();
        assert!(err.to_string().contains("'c_id'"), "{err}");
        let r = Request::new([("cost", "NaN")], Session::default()).unwrap();
        assert!(r.float("cost").is_err());
    }
}
