//! Harness for Portico's end-to-end tests: network namespaces, veth pairs and
//! real servers/clients. The suites arrive with the af_packet driver.
