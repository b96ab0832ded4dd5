//! Near-data commands through a client: Minerva's command/status API over
//! the compute service of the entry node.

use std::time::Duration;

use bytes::Bytes;
use quarry_kernels_api::{
    decode, encode, Assembler, CommandId, CommandResult, CommandState, CommandStatus,
    ComputeAnswer, ComputeCall, Job, Limits, OutputPiece, Target, MAX_AWAIT_MS,
    MAX_OUTPUT_SLICE_BYTES, MAX_RESULT_SLICE_BYTES,
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
            // Well within the call's own timeout, which a wait of the
            // entry node's longest would race.
            let timeout_ms = (left.as_millis() as u64).min(MAX_AWAIT_MS * 2 / 3);
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

    /// A command's output pieces from number `from` on, as they come: the
    /// number of the first, the pieces (none when none came within the
    /// entry node's wait), and whether the last piece is among them.
    /// Asking from `from` releases the pieces before it at the entry node.
    pub async fn output(
        &self,
        id: CommandId,
        from: u64,
    ) -> Result<(u64, Vec<OutputPiece>, bool), ClientError> {
        let call = ComputeCall::Output {
            id,
            from_piece: from,
            max_bytes: MAX_OUTPUT_SLICE_BYTES,
        };
        match self.call(&call, true).await? {
            ComputeAnswer::Pieces {
                first_piece,
                pieces,
                end,
            } => Ok((first_piece, pieces, end)),
            other => Err(unexpected("output", &other)),
        }
    }

    /// Reads a command's output as it streams, handing each piece to
    /// `each` in order, until the last; a failed or cancelled command is an
    /// error naming why. `timeout` bounds the whole read.
    pub async fn stream(
        &self,
        id: CommandId,
        timeout: Duration,
        mut each: impl FnMut(OutputPiece) -> Result<(), ClientError>,
    ) -> Result<(), ClientError> {
        let until = tokio::time::Instant::now() + timeout;
        let mut next = 0u64;
        loop {
            let (first, pieces, end) = match self.output(id, next).await {
                Ok(answer) => answer,
                Err(e) => return Err(self.why(id, e).await),
            };
            if first != next {
                return Err(ClientError::Compute(format!(
                    "asked command {id}'s output from piece {next}, got it from {first}"
                )));
            }
            next += pieces.len() as u64;
            for piece in pieces {
                each(piece)?;
            }
            if end {
                return Ok(());
            }
            if tokio::time::Instant::now() >= until {
                return Err(ClientError::Compute(format!(
                    "command {id} is not done after {} ms",
                    timeout.as_millis()
                )));
            }
        }
    }

    /// A clearer error for a failed read of a command's output: the
    /// command's own state when it failed or was cancelled.
    async fn why(&self, id: CommandId, e: ClientError) -> ClientError {
        match self.status(id).await.map(|s| s.state) {
            Ok(CommandState::Failed { reason }) => {
                ClientError::Compute(format!("command {id} failed: {reason}"))
            }
            Ok(CommandState::Cancelled) => {
                ClientError::Compute(format!("command {id} was cancelled"))
            }
            _ => e,
        }
    }

    /// Submits, reads the output as it streams and returns it whole; a
    /// failed or cancelled command is an error naming why. The whole
    /// result is kept here, so its size is bounded by
    /// [`Limits::result_bytes`].
    pub async fn run(
        &self,
        job: Job,
        targets: Vec<Target>,
        limits: Limits,
    ) -> Result<(CommandResult, u64), ClientError> {
        let id = self.submit(job, targets, limits).await?;
        self.finish_within(
            id,
            Duration::from_millis(limits.time_ms + 5_000),
            limits.result_bytes,
        )
        .await
    }

    /// Reads a submitted command's output and returns it whole, with the
    /// bytes that crossed to the client (at most the largest result limit).
    pub async fn finish(
        &self,
        id: CommandId,
        timeout: Duration,
    ) -> Result<(CommandResult, u64), ClientError> {
        self.finish_within(id, timeout, MAX_RESULT_BYTES).await
    }

    async fn finish_within(
        &self,
        id: CommandId,
        timeout: Duration,
        limit_bytes: u64,
    ) -> Result<(CommandResult, u64), ClientError> {
        let mut assembler = Assembler::default();
        let mut bytes = 0u64;
        self.stream(id, timeout, |piece| {
            bytes += encode(&piece).len() as u64;
            if bytes > limit_bytes {
                return Err(ClientError::Compute(format!(
                    "command {id}: result size limit exceeded: the result takes more than \
                     {limit_bytes} bytes"
                )));
            }
            assembler.push(piece);
            Ok(())
        })
        .await?;
        let result = assembler.finish().ok_or_else(|| {
            ClientError::Compute(format!("command {id}'s output ended without its totals"))
        })?;
        Ok((result, bytes))
    }
}

fn unexpected(what: &'static str, answer: &ComputeAnswer) -> ClientError {
    ClientError::UnexpectedAnswer {
        request: what,
        answer: format!("{answer:?}"),
    }
}
