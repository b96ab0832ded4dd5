/// Why a geometry or an address against it is unusable. The device maps
/// each variant onto its own error of the same name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GeometryError {
    /// The geometry is unusable.
    #[error("invalid geometry: {reason}")]
    InvalidGeometry {
        /// Which field and why.
        reason: String,
    },
    /// An address names a bus, chip, block or page the geometry does not have.
    #[error("address {addr} out of range: {field} {value} > {max} (valid: {valid})")]
    AddressOutOfRange {
        /// The address as given.
        addr: String,
        /// The offending field (`bus`, `chip`, `block`, `page`).
        field: &'static str,
        /// Its value.
        value: u32,
        /// The largest valid value of that field.
        max: u32,
        /// All valid ranges, for the message.
        valid: String,
    },
}
