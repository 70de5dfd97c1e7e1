//! The Kubernetes components the version-skew policy binds: a component must never be newer than
//! an apiserver it talks to (kubernetes.io/releases/version-skew-policy). kubectl is left out: the
//! policy lets it be one minor newer or older than the apiserver.

use std::fmt;

/// A component the version-skew policy binds, named by the first product of its User-Agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Component {
    /// `kubelet`.
    Kubelet,
    /// `kube-proxy`.
    KubeProxy,
    /// `kube-controller-manager`: elects a leader.
    KubeControllerManager,
    /// `kube-scheduler`: elects a leader.
    KubeScheduler,
    /// `cloud-controller-manager`: elects a leader.
    CloudControllerManager,
}

impl Component {
    /// Every component, in the order their bits are kept.
    pub const ALL: [Component; 5] = [
        Component::Kubelet,
        Component::KubeProxy,
        Component::KubeControllerManager,
        Component::KubeScheduler,
        Component::CloudControllerManager,
    ];

    /// The component a User-Agent's first product names, if it is one of these.
    pub fn from_name(name: &str) -> Option<Component> {
        // Every name but kubelet's starts with "kube-" or "cloud-": one length check rules out
        // most other clients.
        match name {
            "kubelet" => Some(Component::Kubelet),
            "kube-proxy" => Some(Component::KubeProxy),
            "kube-controller-manager" => Some(Component::KubeControllerManager),
            "kube-scheduler" => Some(Component::KubeScheduler),
            "cloud-controller-manager" => Some(Component::CloudControllerManager),
            _ => None,
        }
    }

    /// The name, as in a User-Agent and in route files.
    pub fn name(self) -> &'static str {
        match self {
            Component::Kubelet => "kubelet",
            Component::KubeProxy => "kube-proxy",
            Component::KubeControllerManager => "kube-controller-manager",
            Component::KubeScheduler => "kube-scheduler",
            Component::CloudControllerManager => "cloud-controller-manager",
        }
    }

    /// Whether its replicas elect a leader through a Lease, and only the leader writes.
    pub fn elects_a_leader(self) -> bool {
        matches!(
            self,
            Component::KubeControllerManager
                | Component::KubeScheduler
                | Component::CloudControllerManager
        )
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of components.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ComponentSet(u8);

impl ComponentSet {
    /// Every component.
    pub const ALL: ComponentSet = ComponentSet(0b1_1111);

    /// Adds `c`.
    pub fn insert(&mut self, c: Component) {
        self.0 |= c.bit();
    }

    /// Whether `c` is in the set.
    pub fn contains(self, c: Component) -> bool {
        self.0 & c.bit() != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The components in the set, in `Component::ALL`'s order.
    pub fn iter(self) -> impl Iterator<Item = Component> {
        Component::ALL
            .into_iter()
            .filter(move |c| self.contains(*c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_others_are_no_component() {
        for c in Component::ALL {
            assert_eq!(Component::from_name(c.name()), Some(c));
        }
        // client-go's User-Agent names the binary's file (os.Args[0]): a component binary
        // installed under another name is that name, and no component (found with the real
        // ones, started as kube-controller-manager-v1.36.3).
        let renamed = crate::classify::Client::from_user_agent(Some(
            "kube-controller-manager-v1.36.3/v1.36.3 (linux/amd64) kubernetes/abc/leader-election",
        ));
        assert_eq!(Component::from_name(renamed.name), None);
        for other in [
            "kubectl",
            "kube",
            "kubelet2",
            "Kubelet",
            "",
            "kube-apiserver",
        ] {
            assert_eq!(Component::from_name(other), None, "{other}");
        }
        let mut set = ComponentSet::default();
        assert!(set.is_empty());
        set.insert(Component::KubeScheduler);
        assert!(set.contains(Component::KubeScheduler));
        assert!(!set.contains(Component::Kubelet));
        assert_eq!(ComponentSet::ALL.iter().count(), 5);
        assert!(Component::KubeScheduler.elects_a_leader());
        assert!(!Component::Kubelet.elects_a_leader());
    }
}
