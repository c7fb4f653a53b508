//! The gpu-lets server inside the node policy: which events are its (its models'
//! tenants and tasks), which are the node's, and which go to both.

use super::*;

/// Tells whether a user-facing tenant registering now serves a registered model.
pub type IsModel = Box<dyn Fn(TenantId) -> bool + Send>;

/// The gpu-lets server inside the node policy, and what the node routes to it.
pub(super) struct Inference {
    pub(super) server: AdaptiveGpulets,
    pub(super) is_model: IsModel,
    /// The tenants that serve models, and their tasks not yet finished.
    pub(super) models: BTreeSet<TenantId>,
    pub(super) tasks: BTreeSet<TaskId>,
    /// The server's actions on a GPU where the node's own tasks still run, held until
    /// they have finished (a GPU joins the server's while busy with others' work).
    pub(super) held: Vec<Action>,
    /// Per GPU, whether the server uses it ([`AdaptiveGpulets::gpus_in_use`]).
    pub(super) in_use: Vec<bool>,
}

impl std::fmt::Debug for Inference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inference")
            .field("server", &self.server)
            .field("models", &self.models)
            .field("held", &self.held.len())
            .field("in_use", &self.in_use)
            .finish_non_exhaustive()
    }
}

/// Which policy an event is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    Node,
    Server,
    Both,
}

impl Inference {
    /// Route `event`, learning the models and their tasks as they come.
    pub(super) fn route(&mut self, event: &Event) -> Route {
        let model = |t: &TenantId| self.models.contains(t);
        match event {
            Event::TenantRegistered(spec) => {
                if spec.class.is_user_facing() && (self.is_model)(spec.id) {
                    self.models.insert(spec.id);
                    Route::Server
                } else {
                    Route::Node
                }
            }
            Event::TenantLeft { tenant } => {
                if self.models.remove(tenant) {
                    Route::Server
                } else {
                    Route::Node
                }
            }
            Event::TaskSubmitted(t) if model(&t.tenant) => {
                self.tasks.insert(t.id);
                Route::Server
            }
            Event::TaskFinished { task, .. } if self.tasks.remove(task) => Route::Server,
            Event::TaskCancelRequested { task, .. } if self.tasks.contains(task) => Route::Server,
            Event::MemoryRequested { tenant, .. }
            | Event::MemoryFreed { tenant, .. }
            | Event::TenantWeightChanged { tenant, .. }
            | Event::TenantCharged { tenant, .. }
                if model(tenant) =>
            {
                Route::Server
            }
            Event::RepartitionDone { .. } | Event::RepartitionFailed { .. } => Route::Server,
            Event::ActionRefused { action, .. } => match action.as_ref() {
                Action::DispatchBatch { .. } | Action::Repartition { .. } => Route::Server,
                Action::Dispatch { task, .. } if self.tasks.contains(task) => Route::Server,
                _ => Route::Node,
            },
            Event::Tick => Route::Both,
            _ => Route::Node,
        }
    }
}
