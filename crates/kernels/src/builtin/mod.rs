//! The built-in kernels.

mod checksum;
mod fgrep8;
mod grep;
mod wc;
mod wc_utf8_classes;

use std::sync::Arc;

pub use checksum::ChecksumPart;
pub use fgrep8::Fgrep8Part;
pub use grep::GrepPart;
pub use wc::WcPart;

use crate::error::KernelError;
use crate::scan::ScanKernel;
use crate::spec::KernelSpec;

pub(crate) fn compile(spec: &KernelSpec) -> Result<Arc<dyn ScanKernel>, KernelError> {
    match spec {
        KernelSpec::Fgrep8 { pattern } => Ok(Arc::new(fgrep8::Fgrep8::new(*pattern))),
        KernelSpec::Grep(spec) => Ok(Arc::new(grep::Grep::new(spec)?)),
        KernelSpec::Wc(spec) => Ok(Arc::new(wc::Wc::new(spec)?)),
        KernelSpec::Checksum => Ok(Arc::new(checksum::Checksum)),
    }
}
