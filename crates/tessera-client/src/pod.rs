//! A Kubernetes container's allocation (issue 54): what `tessera k8s device-plugin`
//! asks the daemon for in the kubelet's `Allocate`, and the secret the container's
//! processes present to become its tenants.
//!
//! A pod allocation is entered by its [`Token`], not by a uid as a Slurm job is: the
//! containers of a node commonly run as the same uid (root, often), so the uid cannot
//! tell one pod from another. The plugin puts the token in the container's environment
//! (`TESSERA_TOKEN`); the interposer presents it when it registers, and the daemon then
//! gives the tenant the allocation's GPU, memory entitlement and weight, whatever else
//! the program's environment asks for.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// An allocation's secret: 128 random bits, written as 32 lowercase hex digits.
///
/// `Copy` (a fixed array), so that [`crate::TenantOptions`] stays `Copy`. Its `Debug`
/// shows only the first 4 digits: logs and error messages never carry a whole token.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(pub [u8; 16]);

/// A token that is not 32 hex digits.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a tessera token is 32 hex digits (128 bits), not {0} characters of that form")]
pub struct BadToken(pub usize);

impl Token {
    /// A fresh random token, from the kernel's random source (`getrandom`).
    pub fn random() -> std::io::Result<Token> {
        let mut b = [0u8; 16];
        let mut filled = 0;
        while filled < b.len() {
            match rustix::rand::getrandom(&mut b[filled..], rustix::rand::GetRandomFlags::empty()) {
                Ok(n) => filled += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Token(b))
    }

    /// Whether `other` is this token, in time that does not depend on where they
    /// differ (a client guessing a token learns nothing from how long a refusal took).
    pub fn matches(&self, other: &Token) -> bool {
        self.0.iter().zip(other.0.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({:02x}{:02x}…)", self.0[0], self.0[1])
    }
}

impl FromStr for Token {
    type Err = BadToken;

    fn from_str(s: &str) -> Result<Token, BadToken> {
        let s = s.trim();
        if s.len() != 32 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(BadToken(s.chars().count()));
        }
        let mut b = [0u8; 16];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| BadToken(32))?;
        }
        Ok(Token(b))
    }
}

impl Serialize for Token {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Token {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Token, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What a Kubernetes container was allocated on this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodGrant {
    /// The secret its processes present (`TESSERA_TOKEN`).
    pub token: Token,
    /// The GPU its units are on (the plugin keeps one container's units on one GPU).
    pub gpu: u32,
    /// Its memory entitlement, bytes (its units times the unit's size): all its
    /// processes together.
    pub memory: u64,
    /// Its weight for fair sharing: the cluster admin's, for the pod's namespace or
    /// priority class (the plugin's configuration), never the pod's own.
    pub weight: u32,
    /// Who it is, for reports and events: `namespace/pod/container` where the plugin
    /// knows it, else the device ids it was given.
    #[serde(default)]
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_32_hex_digits_both_ways_and_debug_hides_it() {
        let t = Token::random().unwrap();
        let s = t.to_string();
        assert_eq!(s.len(), 32);
        assert_eq!(s.parse::<Token>().unwrap(), t);
        assert_eq!(s.to_uppercase().parse::<Token>().unwrap(), t);
        assert!(!format!("{t:?}").contains(&s[4..]), "Debug shows the whole token");
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, format!("\"{s}\""));
        assert_eq!(serde_json::from_str::<Token>(&json).unwrap(), t);
        for bad in ["", "00", &s[1..], &format!("{s}0"), &format!("g{}", &s[1..])] {
            assert!(bad.parse::<Token>().is_err(), "{bad:?}");
            assert!(serde_json::from_str::<Token>(&format!("\"{bad}\"")).is_err());
        }
        assert_ne!(Token::random().unwrap(), t, "random");
        assert!(t.matches(&t) && !t.matches(&Token([0; 16])));
    }
}
