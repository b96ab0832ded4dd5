//! Near-data commands through a client: Minerva's command/status API over
//! the compute service of the entry node.

use std::time::Duration;

use bytes::Bytes;
use quarry_kernels_api::{
    decode, encode, CommandId, CommandResult, CommandStatus, ComputeAnswer, ComputeCall, Job,
    Limits, Target, MAX_AWAIT_MS, MAX_RESULT_SLICE_BYTES,
};
use quarry_proto::{NodeId, Request, Response, Service, ServiceCall, ENTRY_NODE};

use crate::{Client, ClientError};

/// Most bytes of a result a client fetches (the engine's largest result
/// limit).
const MAX_RESULT_BYTES: u64 = Limits::MAX.result_bytes;

/// Commands at the entry node of a [`Client`].
#[derive(Clone)]
pub struct Compute {
    client: Client,
    members: Vec<NodeId>,
}

impl Client {
    /// The compute service of the entry node: submit kernels over objects,
    /// volume ranges and linear ranges, and follow them. Objects are placed
    /// over the configured members when the client knows them.
    pub fn compute(&self) -> Compute {
        Compute {
            client: self.clone(),
            members: self
                .configured_members()
                .map(<[NodeId]>::to_vec)
                .unwrap_or_default(),
        }
    }
}

impl Compute {
    async fn call(
        &self,
        call: &ComputeCall,
        idempotent: bool,
    ) -> Result<ComputeAnswer, ClientError> {
        let request = Request::Call(Box::new(ServiceCall {
            node: ENTRY_NODE,
            service: Service::Compute,
            idempotent,
            body: Bytes::from(encode(call)),
        }));
        let answer = match self.client.call(request).await? {
            Response::Reply(answer) => answer,
            other => {
                return Err(ClientError::UnexpectedAnswer {
                    request: "compute call",
                    answer: format!("{other:?}"),
                })
            }
        };
        match decode::<ComputeAnswer>("compute answer", &answer)
            .map_err(|e| ClientError::Compute(e.to_string()))?
        {
            ComputeAnswer::Failed(f) => Err(ClientError::Compute(f.message)),
            a => Ok(a),
        }
    }

    /// Submits a command; returns its number at once.
    pub async fn submit(
        &self,
        job: Job,
        targets: Vec<Target>,
        limits: Limits,
    ) -> Result<CommandId, ClientError> {
        let call = ComputeCall::Submit {
            job,
            targets,
            limits,
            members: self.members.clone(),
        };
        // Not idempotent: a resend would start the command twice.
        match self.call(&call, false).await? {
            ComputeAnswer::Submitted { id } => Ok(id),
            other => Err(unexpected("submit", &other)),
        }
    }

    /// A command's status.
    pub async fn status(&self, id: CommandId) -> Result<CommandStatus, ClientError> {
        match self.call(&ComputeCall::Status { id }, true).await? {
            ComputeAnswer::Status(s) => Ok(s),
            other => Err(unexpected("status", &other)),
        }
    }

    /// Waits until the command is final or `timeout` has passed; returns
    /// its status then.
    pub async fn wait(
        &self,
        id: CommandId,
        timeout: Duration,
    ) -> Result<CommandStatus, ClientError> {
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            let timeout_ms = (left.as_millis() as u64).min(MAX_AWAIT_MS);
            let status = match self
                .call(&ComputeCall::Await { id, timeout_ms }, true)
                .await?
            {
                ComputeAnswer::Status(s) => s,
                other => return Err(unexpected("await", &other)),
            };
            if status.state.is_final() || timeout_ms == 0 || left.is_zero() {
                return Ok(status);
            }
        }
    }

    /// Cancels a command; returns its status.
    pub async fn cancel(&self, id: CommandId) -> Result<CommandStatus, ClientError> {
        match self.call(&ComputeCall::Cancel { id }, true).await? {
            ComputeAnswer::Status(s) => Ok(s),
            other => Err(unexpected("cancel", &other)),
        }
    }

    /// Every command the entry node holds.
    pub async fn list(&self) -> Result<Vec<CommandStatus>, ClientError> {
        match self.call(&ComputeCall::List, true).await? {
            ComputeAnswer::Statuses(s) => Ok(s),
            other => Err(unexpected("list", &other)),
        }
    }

    /// A done command's result and its encoded size (the bytes that crossed
    /// to the client), fetched in slices.
    pub async fn result(&self, id: CommandId) -> Result<(CommandResult, u64), ClientError> {
        let mut bytes: Vec<u8> = Vec::new();
        loop {
            let call = ComputeCall::Result {
                id,
                offset: bytes.len() as u64,
                max_bytes: MAX_RESULT_SLICE_BYTES,
            };
            let (total, slice) = match self.call(&call, true).await? {
                ComputeAnswer::ResultSlice { total_bytes, bytes } => (total_bytes, bytes),
                other => return Err(unexpected("result", &other)),
            };
            if total > MAX_RESULT_BYTES {
                return Err(ClientError::Compute(format!(
                    "a result of {total} bytes (at most {MAX_RESULT_BYTES})"
                )));
            }
            if slice.is_empty() && (bytes.len() as u64) < total {
                return Err(ClientError::Compute(format!(
                    "the result stopped at {} of {total} bytes",
                    bytes.len()
                )));
            }
            bytes.extend_from_slice(&slice);
            if bytes.len() as u64 >= total {
                let size = bytes.len() as u64;
                let result = decode::<CommandResult>("command result", &bytes)
                    .map_err(|e| ClientError::Compute(e.to_string()))?;
                return Ok((result, size));
            }
        }
    }

    /// Submits, waits and reads the result; a failed or cancelled command is
    /// an error naming why.
    pub async fn run(
        &self,
        job: Job,
        targets: Vec<Target>,
        limits: Limits,
    ) -> Result<(CommandResult, u64), ClientError> {
        let id = self.submit(job, targets, limits).await?;
        self.finish(id, Duration::from_millis(limits.time_ms + 5_000))
            .await
    }

    /// Waits for a submitted command and reads its result.
    pub async fn finish(
        &self,
        id: CommandId,
        timeout: Duration,
    ) -> Result<(CommandResult, u64), ClientError> {
        let status = self.wait(id, timeout).await?;
        match status.state {
            quarry_kernels_api::CommandState::Done => self.result(id).await,
            quarry_kernels_api::CommandState::Failed { reason } => Err(ClientError::Compute(
                format!("command {id} failed: {reason}"),
            )),
            quarry_kernels_api::CommandState::Cancelled => {
                Err(ClientError::Compute(format!("command {id} was cancelled")))
            }
            other => Err(ClientError::Compute(format!(
                "command {id} is still {other:?} after {} ms",
                timeout.as_millis()
            ))),
        }
    }
}

fn unexpected(what: &'static str, answer: &ComputeAnswer) -> ClientError {
    ClientError::UnexpectedAnswer {
        request: what,
        answer: format!("{answer:?}"),
    }
}
