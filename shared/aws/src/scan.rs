//! A whole table, page by page (a paginated Scan): what `retryctl stats` counts and
//! the demo reads as its witnesses. No function scans a table.

use crate::errors::classify;
use aws_sdk_dynamodb::types::AttributeValue;
use domain::ports::PortError;
use std::collections::HashMap;

/// An item as the DynamoDB SDK returns it.
pub type Item = HashMap<String, AttributeValue>;

/// Hands every item of `table` to `each`, page by page. `attributes`: the projection
/// (through name placeholders: `status` is a reserved word); none = whole items.
/// `consistent`: strongly consistent reads. A failed page is the `Scan` call's error.
pub async fn scan_each(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    attributes: &[&str],
    consistent: bool,
    mut each: impl FnMut(&Item),
) -> Result<(), PortError> {
    let names: HashMap<String, String> = attributes
        .iter()
        .enumerate()
        .map(|(i, a)| (format!("#p{i}"), (*a).to_owned()))
        .collect();
    let projection = (!attributes.is_empty()).then(|| {
        (0..attributes.len())
            .map(|i| format!("#p{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    });
    let mut start: Option<Item> = None;
    loop {
        let page = ddb
            .scan()
            .table_name(table)
            .consistent_read(consistent)
            .set_projection_expression(projection.clone())
            .set_expression_attribute_names((!names.is_empty()).then(|| names.clone()))
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| classify("Scan", &e, |_| None))?;
        page.items().iter().for_each(&mut each);
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => break,
        }
    }
    Ok(())
}
