//! A real OTLP/gRPC receiver on 127.0.0.1 (the protocol's own trace and
//! metrics service definitions, served by tonic), recording every export
//! request: what the telemetry tests and the trace-export bench send to.

use std::sync::{Arc, Mutex, PoisonError};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::trace::v1::Span;

/// The export requests received so far.
#[derive(Clone, Default)]
pub struct Receiver {
    traces: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    metrics: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.traces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tonic::async_trait]
impl MetricsService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: None,
        }))
    }
}

impl Receiver {
    /// Serves on 127.0.0.1 (an ephemeral port) on the current runtime;
    /// returns the receiver and its `http://` endpoint.
    pub async fn start() -> (Receiver, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver");
        let addr = listener.local_addr().expect("receiver address");
        let receiver = Receiver::default();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(receiver.clone()))
                .add_service(MetricsServiceServer::new(receiver.clone()))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        (receiver, format!("http://{addr}"))
    }

    /// Every span received.
    pub fn spans(&self) -> Vec<Span> {
        self.traces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| s.spans.clone())
            .collect()
    }

    /// Every metric received, in export order (cumulative metrics repeat
    /// with each export; the last one of a name is the latest).
    pub fn metrics(&self) -> Vec<Metric> {
        self.metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .flat_map(|r| &r.resource_metrics)
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| s.metrics.clone())
            .collect()
    }

    /// Everything received, as debug text: what a "nothing of X was
    /// exported" check searches.
    pub fn everything(&self) -> String {
        format!(
            "{:?}\n{:?}",
            self.traces.lock().unwrap_or_else(PoisonError::into_inner),
            self.metrics.lock().unwrap_or_else(PoisonError::into_inner)
        )
    }
}
