//! THE price table: every dollar figure the benchmark uses, in one place, with its
//! date and source. Published us-east-1 on-demand prices as gathered in the project's
//! reference sheet (`REFERENCE.md`); prices change, so the report prints this table
//! and its date beside every result. Free tiers are ignored.

/// One published price: `usd` dollars per `per` units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub usd: f64,
    pub per: f64,
    /// What is counted (`write request units`, `requests`, `GB-seconds`, …).
    pub unit: &'static str,
    pub source: &'static str,
}

impl Price {
    /// Dollars for one unit.
    pub fn unit_usd(&self) -> f64 {
        self.usd / self.per
    }

    /// Dollars for `units` units.
    pub fn cost(&self, units: f64) -> f64 {
        units * self.unit_usd()
    }
}

/// The prices the model uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PriceTable {
    /// When these prices were gathered (`yyyy-mm`).
    pub as_of: &'static str,
    pub region: &'static str,
    pub dynamodb_write_request_unit: Price,
    pub dynamodb_read_request_unit: Price,
    /// SQS standard queue; every 64 KB chunk of a request's payload is one request.
    pub sqs_request: Price,
    /// SQS FIFO queue (the request queue in outbox delivery), per 64 KB chunk.
    pub sqs_fifo_request: Price,
    pub scheduler_invocation: Price,
    pub lambda_request: Price,
    pub lambda_gb_second_arm64: Price,
    pub lambda_gb_second_x86_64: Price,
    pub step_functions_standard_transition: Price,
    pub durable_operation: Price,
    pub durable_data_written_gb: Price,
}

const MILLION: f64 = 1_000_000.0;

/// us-east-1, on-demand, gathered 2026-12.
pub const PRICES: PriceTable = PriceTable {
    as_of: "2026-12",
    region: "us-east-1",
    dynamodb_write_request_unit: Price {
        usd: 0.625,
        per: MILLION,
        unit: "write request units (on-demand)",
        source: "aws.amazon.com/dynamodb/pricing (after the 2024-11-01 price cut)",
    },
    dynamodb_read_request_unit: Price {
        usd: 0.125,
        per: MILLION,
        unit: "read request units (on-demand)",
        source: "aws.amazon.com/dynamodb/pricing",
    },
    sqs_request: Price {
        usd: 0.40,
        per: MILLION,
        unit: "requests (standard queue, per 64 KB chunk)",
        source: "aws.amazon.com/sqs/pricing",
    },
    sqs_fifo_request: Price {
        usd: 0.50,
        per: MILLION,
        unit: "requests (FIFO queue, per 64 KB chunk)",
        source: "aws.amazon.com/sqs/pricing",
    },
    scheduler_invocation: Price {
        usd: 1.00,
        per: MILLION,
        unit: "schedule invocations",
        source: "aws.amazon.com/eventbridge/pricing (Scheduler; 14 M free a month ignored)",
    },
    lambda_request: Price {
        usd: 0.20,
        per: MILLION,
        unit: "requests",
        source: "aws.amazon.com/lambda/pricing",
    },
    lambda_gb_second_arm64: Price {
        usd: 0.000_013_333_4,
        per: 1.0,
        unit: "GB-seconds (arm64)",
        source: "aws.amazon.com/lambda/pricing",
    },
    lambda_gb_second_x86_64: Price {
        usd: 0.000_016_666_7,
        per: 1.0,
        unit: "GB-seconds (x86_64)",
        source: "aws.amazon.com/lambda/pricing",
    },
    step_functions_standard_transition: Price {
        usd: 0.025,
        per: 1_000.0,
        unit: "state transitions (Standard)",
        source: "aws.amazon.com/step-functions/pricing",
    },
    durable_operation: Price {
        usd: 8.00,
        per: MILLION,
        unit: "durable operations",
        source: "aws.amazon.com/lambda/pricing (durable functions, Dec 2025 launch)",
    },
    durable_data_written_gb: Price {
        usd: 0.25,
        per: 1.0,
        unit: "GB of durable data written",
        source: "aws.amazon.com/lambda/pricing (durable functions)",
    },
};

impl PriceTable {
    /// Every price with its label, in print order.
    pub fn rows(&self) -> Vec<(&'static str, Price)> {
        vec![
            (
                "DynamoDB write request unit",
                self.dynamodb_write_request_unit,
            ),
            (
                "DynamoDB read request unit",
                self.dynamodb_read_request_unit,
            ),
            ("SQS request", self.sqs_request),
            ("SQS FIFO request", self.sqs_fifo_request),
            (
                "EventBridge Scheduler invocation",
                self.scheduler_invocation,
            ),
            ("Lambda request", self.lambda_request),
            ("Lambda GB-second, arm64", self.lambda_gb_second_arm64),
            ("Lambda GB-second, x86_64", self.lambda_gb_second_x86_64),
            (
                "Step Functions Standard state transition",
                self.step_functions_standard_transition,
            ),
            ("Lambda durable operation", self.durable_operation),
            ("Lambda durable data written", self.durable_data_written_gb),
        ]
    }

    /// The GB-second price of an architecture (`arm64` or `x86_64`).
    pub fn lambda_gb_second(&self, architecture: &str) -> Price {
        if architecture == "x86_64" {
            self.lambda_gb_second_x86_64
        } else {
            self.lambda_gb_second_arm64
        }
    }
}
