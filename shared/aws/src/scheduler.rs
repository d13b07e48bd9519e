//! EventBridge Scheduler adapter: one-time schedules with the article's settings
//! (listed in `docs/adapters.md#eventbridge-scheduler`): in the dedicated group,
//! `at(yyyy-mm-ddThh:mm:ss)` from the persisted `next_fire_at`, `UTC` written out,
//! `FlexibleTimeWindow` OFF, `ActionAfterCompletion=DELETE`, target the retry queue with
//! the scheduler role, `RetryPolicy` and the scheduler DLQ. Never in the past: an
//! instant less than `domain::decide::SCHEDULE_LEAD` ahead is moved to that lead
//! ([`ScheduleSpec::create_at`]).
//!
//! `ConflictException` on create → `AlreadyExists` (success: the name is deterministic);
//! `ResourceNotFoundException` on delete → `NotFound` (success). Throttling is retried by
//! the client's bounded strategy ([`crate::clients::retry_config`]), then `Retryable`.

use crate::config::SchedulerSettings;
use crate::errors::settled;
use aws_sdk_scheduler::operation::create_schedule::CreateScheduleError;
use aws_sdk_scheduler::operation::delete_schedule::DeleteScheduleError;
use aws_sdk_scheduler::types::{
    ActionAfterCompletion, DeadLetterConfig, FlexibleTimeWindow, FlexibleTimeWindowMode,
    RetryPolicy, Target,
};
use aws_sdk_scheduler::Client;
use domain::decide::ScheduleSpec;
use domain::ports::{
    Clock, PortError, ScheduleCreated, ScheduleCreator, ScheduleDeleted, ScheduleDeleter,
    SystemClock,
};
use domain::{ScheduleName, Timestamp};
use std::sync::Arc;

/// The timezone written on every schedule.
pub const SCHEDULE_TIMEZONE: &str = "UTC";

/// `at(2026-10-03T16:38:00)` from the persisted fire time, for a schedule created
/// at `now` ([`ScheduleSpec::create_at`]).
pub fn schedule_expression(spec: &ScheduleSpec, now: Timestamp) -> String {
    format!("at({})", spec.create_at(now).to_schedule_at())
}

/// The [`Scheduler`] on EventBridge Scheduler.
#[derive(Clone)]
pub struct EventBridgeScheduler {
    client: Client,
    settings: SchedulerSettings,
    /// When a call is made (the system clock; a test's own where time is its).
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for EventBridgeScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBridgeScheduler")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

crate::errors::error_kinds!(
    // A used-up quota of active schedules frees up as schedules fire and delete
    // themselves: the message comes back after its visibility timeout.
    fn create_kind(CreateScheduleError) {
        retryable: [ThrottlingException, InternalServerException, ServiceQuotaExceededException],
        permanent: [ValidationException, ResourceNotFoundException],
    }
);

crate::errors::error_kinds!(
    fn delete_kind(DeleteScheduleError) {
        retryable: [ThrottlingException, InternalServerException, ConflictException],
        permanent: [ValidationException],
    }
);

impl EventBridgeScheduler {
    /// `client` should come from [`crate::clients::scheduler`] (bounded retries).
    pub fn new(client: Client, settings: SchedulerSettings) -> Self {
        Self {
            client,
            settings,
            clock: Arc::new(SystemClock),
        }
    }

    /// The same adapter, reading the time of its calls from `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn settings(&self) -> &SchedulerSettings {
        &self.settings
    }

    fn target(&self, spec: &ScheduleSpec) -> Result<Target, PortError> {
        Target::builder()
            .arn(&self.settings.retry_queue_arn)
            .role_arn(&self.settings.role_arn)
            .input(spec.event.to_json())
            .retry_policy(
                RetryPolicy::builder()
                    .maximum_retry_attempts(
                        i32::try_from(self.settings.retry_attempts).unwrap_or(185),
                    )
                    .maximum_event_age_in_seconds(
                        i32::try_from(self.settings.max_event_age_seconds).unwrap_or(86_400),
                    )
                    .build(),
            )
            .dead_letter_config(
                DeadLetterConfig::builder()
                    .arn(&self.settings.dlq_arn)
                    .build(),
            )
            .build()
            .map_err(|e| PortError::permanent("CreateSchedule", e.to_string()))
    }
}

impl ScheduleCreator for EventBridgeScheduler {
    async fn create(&self, spec: &ScheduleSpec) -> Result<ScheduleCreated, PortError> {
        let window = FlexibleTimeWindow::builder()
            .mode(FlexibleTimeWindowMode::Off)
            .build()
            .map_err(|e| PortError::permanent("CreateSchedule", e.to_string()))?;
        let target = self.target(spec)?;
        let result = self
            .client
            .create_schedule()
            .name(spec.name.as_str())
            .group_name(&self.settings.group)
            .schedule_expression(schedule_expression(spec, self.clock.now()))
            .schedule_expression_timezone(SCHEDULE_TIMEZONE)
            .flexible_time_window(window)
            .action_after_completion(ActionAfterCompletion::Delete)
            .target(target)
            .send()
            .await;
        settled(
            "CreateSchedule",
            result,
            (ScheduleCreated::Created, ScheduleCreated::AlreadyExists),
            CreateScheduleError::is_conflict_exception,
            create_kind,
        )
    }
}

impl ScheduleDeleter for EventBridgeScheduler {
    async fn delete(&self, name: &ScheduleName) -> Result<ScheduleDeleted, PortError> {
        let result = self
            .client
            .delete_schedule()
            .name(name.as_str())
            .group_name(&self.settings.group)
            .send()
            .await;
        settled(
            "DeleteSchedule",
            result,
            (ScheduleDeleted::Deleted, ScheduleDeleted::NotFound),
            DeleteScheduleError::is_resource_not_found_exception,
            delete_kind,
        )
    }
}
