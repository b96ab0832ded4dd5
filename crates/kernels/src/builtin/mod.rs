//! The built-in kernels.

mod fgrep8;

use std::sync::Arc;

pub use fgrep8::Fgrep8Part;

use crate::error::KernelError;
use crate::scan::ScanKernel;
use crate::spec::KernelSpec;

pub(crate) fn compile(spec: &KernelSpec) -> Result<Arc<dyn ScanKernel>, KernelError> {
    match spec {
        KernelSpec::Fgrep8 { pattern } => Ok(Arc::new(fgrep8::Fgrep8::new(*pattern))),
        _ => Err(KernelError::Unsupported("not yet".into())),
    }
}
