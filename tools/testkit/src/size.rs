//! DynamoDB's size of an item, by its published rule ("Item sizes and formats" in the
//! DynamoDB Developer Guide): what write and read units are billed by, and what the
//! 400 KB item limit counts.
//!
//! - an attribute is its name's UTF-8 bytes plus its value's size;
//! - a string or binary is its bytes; a number about 1 byte per two significant
//!   digits plus 1; a boolean or a null 1 byte;
//! - a Map or a List is 3 bytes plus, per element, 1 byte + its name (Map) + its value;
//!   a set is the sum of its members.

use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

/// The size of a number given as text: 1 byte per two significant digits + 1.
pub fn number_size(text: &str) -> usize {
    let digits: String = text
        .trim()
        .trim_start_matches(['-', '+'])
        .split(['e', 'E'])
        .next()
        .unwrap_or("")
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
    significant.div_ceil(2) + 1
}

/// The size of an attribute value of any type, nested ones included.
pub fn attribute_value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, v)| k.len() + attribute_value_size(v) + 1)
                .sum::<usize>()
        }
        AttributeValue::L(l) => 3 + l.iter().map(|v| attribute_value_size(v) + 1).sum::<usize>(),
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        _ => 1,
    }
}

/// The size of an item as the SDK holds it.
pub fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter()
        .map(|(name, value)| name.len() + attribute_value_size(value))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttributeValue as A;

    #[test]
    fn numbers_cost_a_byte_per_two_significant_digits_plus_one() {
        assert_eq!(number_size("1"), 2);
        assert_eq!(number_size("12"), 2);
        assert_eq!(number_size("123"), 3);
        assert_eq!(
            number_size("1790000000"),
            2 + 1,
            "trailing zeros are trimmed"
        );
        assert_eq!(number_size("0.5"), 2);
        assert_eq!(number_size("0"), 1);
        assert_eq!(number_size("-12.5e3"), 3);
    }

    #[test]
    fn maps_and_lists_cost_three_bytes_plus_one_per_element() {
        let entry: HashMap<String, A> = [
            ("to".to_owned(), A::S("FAILED".into())),
            ("n".to_owned(), A::N("12".into())),
        ]
        .into_iter()
        .collect();
        // 3 + (2 + 6 + 1) + (1 + 2 + 1) = 16
        assert_eq!(attribute_value_size(&A::M(entry.clone())), 16);
        assert_eq!(attribute_value_size(&A::L(vec![A::Bool(true)])), 3 + 1 + 1);
        assert_eq!(
            attribute_value_size(&A::Ss(vec!["ab".into(), "c".into()])),
            3
        );
        assert_eq!(attribute_value_size(&A::Null(true)), 1);
        let item: HashMap<String, A> = [
            ("id".to_owned(), A::S("a".into())),
            ("e#1".to_owned(), A::M(entry)),
        ]
        .into_iter()
        .collect();
        assert_eq!(item_size(&item), 2 + 1 + 3 + 16);
        assert_eq!(item_size(&HashMap::new()), 0);
    }
}
