//! The gRPC face (feature `grpc`): the .proto against the reference's,
//! the committed generated code against a fresh generation, tapd's layout
//! against the tapd fixtures, and the service over loopback on the memory
//! store and SQLite, the mirror client against it, and a Go client built
//! from the reference's own .proto files and mssmt package against it.

mod codegen;
mod conformance;
mod go_client;
mod insert;
mod layout;
mod mirror;
mod service;
