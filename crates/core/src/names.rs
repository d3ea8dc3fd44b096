//! The names users type for a choice (a policy, a scheduler, a basis), as messages and the
//! `shortfirst vocabulary` listing spell them: each enum's names are defined once, by its
//! `strum::VariantNames` derive, and listed from there.

/// `a, b or c`: the names a message says were expected.
pub fn one_of(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::one_of;

    #[test]
    fn lists_read_as_a_sentence() {
        assert_eq!(one_of(&[]), "");
        assert_eq!(one_of(&["wall"]), "wall");
        assert_eq!(one_of(&["share", "wall"]), "share or wall");
        assert_eq!(one_of(&["share", "wall", "serial"]), "share, wall or serial");
    }
}
