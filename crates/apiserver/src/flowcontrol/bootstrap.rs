//! kube-apiserver's bootstrap API Priority and Fairness configuration
//! (`k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap/default.go`): the mandatory and suggested
//! PriorityLevelConfigurations and FlowSchemas, with their names, shares, queuing parameters,
//! precedences and rules. Fixed: this server does not serve the `flowcontrol.apiserver.k8s.io`
//! objects, so they cannot be changed.

use super::queueset::Queuing;

/// A PriorityLevelConfiguration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorityLevel {
    pub name: &'static str,
    /// `Exempt`: never queued or limited.
    pub exempt: bool,
    /// `nominalConcurrencyShares`.
    pub shares: u32,
    /// `lendablePercent` (kept for reference: this server does not lend or borrow seats).
    pub lendable_percent: u32,
    /// `limitResponse`: `Queue` with these parameters, or `Reject` (`None`).
    pub queuing: Option<Queuing>,
}

const fn queue(queues: usize, hand_size: usize) -> Option<Queuing> {
    Some(Queuing { queues, hand_size, queue_length_limit: 50 })
}

/// The bootstrap priority levels.
pub const PRIORITY_LEVELS: &[PriorityLevel] = &[
    PriorityLevel { name: "exempt", exempt: true, shares: 0, lendable_percent: 0, queuing: None },
    PriorityLevel { name: "system", exempt: false, shares: 30, lendable_percent: 33, queuing: queue(64, 6) },
    PriorityLevel { name: "node-high", exempt: false, shares: 40, lendable_percent: 25, queuing: queue(64, 6) },
    PriorityLevel { name: "leader-election", exempt: false, shares: 10, lendable_percent: 0, queuing: queue(16, 4) },
    PriorityLevel { name: "workload-high", exempt: false, shares: 40, lendable_percent: 50, queuing: queue(128, 6) },
    PriorityLevel { name: "workload-low", exempt: false, shares: 100, lendable_percent: 90, queuing: queue(128, 6) },
    PriorityLevel { name: "global-default", exempt: false, shares: 20, lendable_percent: 50, queuing: queue(128, 6) },
    PriorityLevel { name: "catch-all", exempt: false, shares: 5, lendable_percent: 0, queuing: None },
];

/// How a FlowSchema splits its requests into flows (`distinguisherMethod.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distinguisher {
    ByUser,
    ByNamespace,
}

/// Who a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    User(&'static str),
    Group(&'static str),
    /// `name` may be `*`: every service account of the namespace.
    ServiceAccount {
        namespace: &'static str,
        name: &'static str,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceRule {
    pub verbs: &'static [&'static str],
    pub api_groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    pub namespaces: &'static [&'static str],
    pub cluster_scope: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonResourceRule {
    pub verbs: &'static [&'static str],
    pub non_resource_urls: &'static [&'static str],
}

/// A FlowSchema with one `rules` entry (every bootstrap schema has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSchema {
    pub name: &'static str,
    pub priority_level: &'static str,
    pub matching_precedence: i32,
    pub distinguisher: Option<Distinguisher>,
    pub subjects: &'static [Subject],
    pub resource_rules: &'static [ResourceRule],
    pub non_resource_rules: &'static [NonResourceRule],
}

const ALL: &[&str] = &["*"];
const ELECTION_VERBS: &[&str] = &["get", "create", "update"];
const EVERYTHING: &[ResourceRule] =
    &[ResourceRule { verbs: ALL, api_groups: ALL, resources: ALL, namespaces: ALL, cluster_scope: true }];
const ALL_NON_RESOURCE: &[NonResourceRule] = &[NonResourceRule { verbs: ALL, non_resource_urls: ALL }];
const LEASES: &[ResourceRule] = &[ResourceRule {
    verbs: ELECTION_VERBS,
    api_groups: &["coordination.k8s.io"],
    resources: &["leases"],
    namespaces: ALL,
    cluster_scope: false,
}];
const EVERYONE: &[Subject] = &[Subject::Group("system:unauthenticated"), Subject::Group("system:authenticated")];
const KUBE_SYSTEM_SERVICE_ACCOUNTS: Subject = Subject::ServiceAccount { namespace: "kube-system", name: "*" };
const KUBE_CONTROLLER_MANAGER: &str = "system:kube-controller-manager";
const KUBE_SCHEDULER: &str = "system:kube-scheduler";

/// The bootstrap FlowSchemas, in matching order (precedence, then name).
pub const FLOW_SCHEMAS: &[FlowSchema] = &[
    FlowSchema {
        name: "exempt",
        priority_level: "exempt",
        matching_precedence: 1,
        distinguisher: None,
        subjects: &[Subject::Group("system:masters")],
        resource_rules: EVERYTHING,
        non_resource_rules: ALL_NON_RESOURCE,
    },
    FlowSchema {
        name: "probes",
        priority_level: "exempt",
        matching_precedence: 2,
        distinguisher: None,
        subjects: EVERYONE,
        resource_rules: &[],
        non_resource_rules: &[NonResourceRule {
            verbs: &["get"],
            non_resource_urls: &["/healthz", "/readyz", "/livez"],
        }],
    },
    FlowSchema {
        name: "system-leader-election",
        priority_level: "leader-election",
        matching_precedence: 100,
        distinguisher: Some(Distinguisher::ByUser),
        subjects: &[
            Subject::User(KUBE_CONTROLLER_MANAGER),
            Subject::User(KUBE_SCHEDULER),
            KUBE_SYSTEM_SERVICE_ACCOUNTS,
        ],
        resource_rules: LEASES,
        non_resource_rules: &[],
    },
    FlowSchema {
        name: "endpoint-controller",
        priority_level: "workload-high",
        matching_precedence: 150,
        distinguisher: Some(Distinguisher::ByUser),
        subjects: &[
            Subject::User(KUBE_CONTROLLER_MANAGER),
            Subject::ServiceAccount { namespace: "kube-system", name: "endpoint-controller" },
        ],
        resource_rules: &[ResourceRule {
            verbs: ELECTION_VERBS,
            api_groups: &[""],
            resources: &["endpoints"],
            namespaces: ALL,
            cluster_scope: false,
        }],
        non_resource_rules: &[],
    },
    FlowSchema {
        name: "workload-leader-election",
        priority_level: "leader-election",
        matching_precedence: 200,
        distinguisher: Some(Distinguisher::ByUser),
        subjects: &[KUBE_SYSTEM_SERVICE_ACCOUNTS],
        resource_rules: LEASES,
        non_resource_rules: &[],
    },
    FlowSchema {
        name: "system-node-high",
        priority_level: "node-high",
        matching_precedence: 400,
        distinguisher: Some(Distinguisher::ByUser),
        subjects: &[Subject::Group("system:nodes")],
        resource_rules: &[
            ResourceRule {
                verbs: ALL,
                api_groups: &[""],
                resources: &["nodes", "nodes/status"],
                namespaces: ALL,
                cluster_scope: true,
            },
            ResourceRule {
                verbs: ALL,
                api_groups: &["coordination.k8s.io"],
                resources: &["leases"],
                namespaces: ALL,
                cluster_scope: false,
            },
        ],
        non_resource_rules: &[],
    },
    FlowSchema {
        name: "system-nodes",
        priority_level: "system",
        matching_precedence: 500,
        distinguisher: Some(Distinguisher::ByUser),
        subjects: &[Subject::Group("system:nodes")],
        resource_rules: EVERYTHING,
        non_resource_rules: ALL_NON_RESOURCE,
    },
    FlowSchema {
        name: "kube-controller-manager",
        priority_level: "workload-high",
        matching_precedence: 800,
        distinguisher: Some(Distinguisher::ByNamespace),
        subjects: &[Subject::User(KUBE_CONTROLLER_MANAGER)],
        resource_rules: EVERYTHING,
        non_resource_rules: ALL_NON_RESOURCE,
    },
    FlowSchema {
        name: "kube-scheduler",
        priority_level: "workload-high",
        matching_precedence: 800,
        distinguisher: Some(Distinguisher::ByNamespace),
        subjects: &[Subject::User(KUBE_SCHEDULER)],
        resource_rules: EVERYTHING,
        non_resource_rules: ALL_NON_RESOURCE,
    },
    FlowSchema {
        name: "kube-system-service-accounts",
        priority_level: "workload-high",
        matching_precedence: 900,
        distinguisher: Some(Distinguisher::ByNamespace),
        subjects: &[KUBE_SYSTEM_SERVICE_ACCOUNTS],
        resource_rules: EVERYTHING,
        non_resource_rules: ALL_NON_RESOURCE,
    },
    FlowSchema {
        name: "service-accounts",
        priority_level: "workload-low",
        matching_precedence: 9000,
        distinguisher: Some(Distinguisher::ByUser),
        subjects: &[Subject::Group("system:serviceaccounts")],
        resource_rules: EVERYTHING,
        non_resource_rules: ALL_NON_RESOURCE,
    },
    FlowSchema {
        name: "global-default",
        priority_level: "global-default",
        matching_precedence: 9900,
        distinguisher: Some(Distinguisher::ByUser),
        subjects: EVERYONE,
        resource_rules: EVERYTHING,
        non_resource_rules: ALL_NON_RESOURCE,
    },
    FlowSchema {
        name: "catch-all",
        priority_level: "catch-all",
        matching_precedence: 10000,
        distinguisher: Some(Distinguisher::ByUser),
        subjects: EVERYONE,
        resource_rules: EVERYTHING,
        non_resource_rules: ALL_NON_RESOURCE,
    },
];

/// The user names kube's control-plane components authenticate as.
pub mod users {
    pub const KUBE_CONTROLLER_MANAGER: &str = super::KUBE_CONTROLLER_MANAGER;
    pub const KUBE_SCHEDULER: &str = super::KUBE_SCHEDULER;
    /// The group of every kubelet (`system:node:<name>`).
    pub const NODES_GROUP: &str = "system:nodes";
    /// The group of every service account.
    pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
}
