//! The Rust floor of `make bench-sdk`: a bare tonic worker (the generated API, tonic and tokio;
//! no SDK) on one Work stream that answers SUCCESS for every lease of a response at once, in one
//! Outcomes message.
use std::time::Duration;

use anyhow::{Context as _, bail};
use informerd_api::v1::outcome::Result as OutcomeResult;
use informerd_api::v1::work_client::WorkClient;
use informerd_api::v1::{
    Outcome, Outcomes, ProcessRequest, Start, process_request, process_response,
};
use informerd_bench::{Args, READY, Tally, emit, emit_result, endpoint_uri};
use tokio_stream::wrappers::UnboundedReceiverStream;

const USAGE: &str = "\
tonic-floor --target=HOST:PORT --queue=Q --keys=N [--batch=1] [--in-flight=8]
            [--object-informer=ID] [--runtime=current|multi]

Drains N keys from queue Q on one Work stream (Start.max_batch = batch, max_in_flight = in
flight, object_informer_id = ID), answering SUCCESS for every lease of a response at once, and
prints `result {\"keys\", \"seconds\", \"keys_per_second\", \"cpu_s\"}` timed from the first
lease to the N-th. `ready` is printed once the stream has started. --runtime: tokio's
current-thread runtime (the default) or the multi-thread one.";

fn main() -> anyhow::Result<()> {
    let args = Args::from_env(USAGE)?;
    let runtime = informerd_bench::runtime(&args)?;
    let tally = runtime.block_on(drain(&args))?;
    emit_result(&tally.result());
    Ok(())
}

async fn drain(args: &Args) -> anyhow::Result<Tally> {
    let target = args.required("target")?;
    let keys = args.number("keys", 0)?;
    if keys == 0 {
        bail!("--keys must be at least 1");
    }
    let start = Start {
        queue: args.required("queue")?,
        max_batch: u32::try_from(args.number("batch", 1)?).context("--batch")?,
        max_in_flight: u32::try_from(args.number("in-flight", 8)?).context("--in-flight")?,
        worker_name: "bench-tonic-floor".to_string(),
        object_informer_id: args.string("object-informer", ""),
        ..Default::default()
    };
    let channel = tonic::transport::Endpoint::from_shared(endpoint_uri(&target))
        .with_context(|| format!("--target={target}"))?
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .connect()
        .await
        .with_context(|| format!("connecting to {target}"))?;
    let mut work = WorkClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let (outbox, requests) = tokio::sync::mpsc::unbounded_channel();
    let request = |kind| ProcessRequest { kind: Some(kind) };
    outbox.send(request(process_request::Kind::Start(start)))?;
    let mut responses = work
        .process(UnboundedReceiverStream::new(requests))
        .await
        .context("Work.Process")?
        .into_inner();
    let mut tally = Tally::new(keys);
    let mut refused = 0usize;
    while let Some(response) = responses.message().await.context("Work.Process")? {
        match response.kind {
            Some(process_response::Kind::Started(_)) => emit(READY),
            Some(process_response::Kind::Leases(leases)) => {
                tally.take(leases.leases.len());
                let outcomes = leases
                    .leases
                    .into_iter()
                    .map(|lease| Outcome {
                        key: lease.key,
                        token: lease.token,
                        result: OutcomeResult::Success as i32,
                        ..Default::default()
                    })
                    .collect();
                outbox.send(request(process_request::Kind::Outcomes(Outcomes {
                    outcomes,
                })))?;
                if tally.finished() {
                    break;
                }
            }
            Some(process_response::Kind::Refusals(r)) => refused += r.refusals.len(),
            None => {}
        }
    }
    if !tally.finished() {
        bail!("the stream ended after {} of {keys} keys", tally.done());
    }
    if refused > 0 {
        bail!("{refused} outcomes refused: a floor's outcomes are all for leases it holds");
    }
    Ok(tally)
}
