/* Portico's shim over DPDK 22.11: the static-inline calls (burst I/O, mbuf
 * accessors, rte_errno, rte_lcore_id) as real functions, and the two
 * structures Portico needs the layout of (rte_eth_conf, rte_eth_dev_info)
 * reduced to plain fields, so Rust treats every DPDK structure as opaque. */
#ifndef PORTICO_DPDK_SHIM_H
#define PORTICO_DPDK_SHIM_H

#include <stdint.h>

struct rte_mbuf;
struct rte_mempool;

/* A received (or allocated) frame: the mbuf and its single segment. */
struct portico_frame {
	struct rte_mbuf *mbuf;
	uint8_t *data;
	/* Bytes of the frame; may be lowered (truncate) before tx. */
	uint16_t len;
	/* The NIC marked both the IPv4 header and the L4 checksum good. */
	uint8_t checksum_verified;
	uint8_t reserved[5];
};

/* What Portico needs from rte_eth_dev_info. */
struct portico_dev_caps {
	uint16_t max_rx_queues;
	uint16_t max_tx_queues;
	uint16_t rx_desc_max;
	uint16_t tx_desc_max;
	uint16_t min_mtu;
	uint16_t max_mtu;
	uint32_t max_rx_pktlen;
	uint64_t flow_type_rss_offloads;
	uint64_t rx_offload_capa;
	char driver_name[64];
};

/* Receive up to n frames of (port, queue) into out. Multi-segment mbufs are
 * freed and counted in *multiseg_dropped. Returns the frames stored. */
uint16_t portico_rx_burst(uint16_t port, uint16_t queue, struct portico_frame *out, uint16_t n,
			  uint64_t *multiseg_dropped);

/* Set each frame's mbuf length to frame.len, then transmit from the front;
 * returns how many the PMD took (they are its to free). */
uint16_t portico_tx_burst(uint16_t port, uint16_t queue, const struct portico_frame *frames,
			  uint16_t n);

/* Give one mbuf back to its pool. */
void portico_mbuf_free(struct rte_mbuf *m);

/* An mbuf of pool holding a copy of bytes[0..len]; 0 on success, -1 when the
 * pool is empty or the mbuf too small. */
int portico_frame_from(struct rte_mempool *pool, const uint8_t *bytes, uint16_t len,
		       struct portico_frame *out);

/* Lengthen a frame to len bytes inside its mbuf: up to the mbuf's data_len
 * (bytes a truncate gave up), then into its tailroom with
 * rte_pktmbuf_append. 0 on success; -1, and nothing changes, when the mbuf's
 * tailroom is too small. */
int portico_frame_extend(struct portico_frame *f, uint16_t len);

/* rte_errno of the calling thread. */
int portico_errno(void);

/* rte_lcore_id() of the calling thread (UINT32_MAX: not an EAL thread). */
uint32_t portico_lcore_id(void);

/* rte_eth_dev_configure with RSS over IPv4/TCP/UDP (as far as the device
 * supports it) when nb_rx > 1, RX checksum offload when supported and
 * rx_checksum is set. Returns 0 or a negative errno. */
int portico_eth_configure(uint16_t port, uint16_t nb_rx, uint16_t nb_tx, int rx_checksum);

/* rte_eth_dev_info_get reduced to portico_dev_caps. Returns 0 or a negative
 * errno. */
int portico_eth_dev_caps(uint16_t port, struct portico_dev_caps *out);

#endif
