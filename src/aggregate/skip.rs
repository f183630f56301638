//! aggregate: what the report models leave out when they are written.

/// For `skip_serializing_if`: a count or a time of 0 is left out of a report.
pub(crate) fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}
