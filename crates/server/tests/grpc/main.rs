//! The gRPC face (feature `grpc`): the .proto against the reference's,
//! the committed generated code against a fresh generation, tapd's layout
//! against the tapd fixtures, and the service over loopback on the memory
//! store and SQLite, and the mirror client against it.

mod codegen;
mod conformance;
mod insert;
mod layout;
mod mirror;
mod service;
