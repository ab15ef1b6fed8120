/* See shim.h. Compiled with the cflags of `pkg-config --cflags libdpdk`
 * (which include `-include rte_config.h`). */
#include <string.h>

#include <rte_config.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "shim.h"

#define PORTICO_TX_CHUNK 64

static inline int rx_checksum_good(const struct rte_mbuf *m)
{
	return (m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_GOOD &&
	       (m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD;
}

uint16_t portico_rx_burst(uint16_t port, uint16_t queue, struct portico_frame *out, uint16_t n,
			  uint64_t *multiseg_dropped)
{
	struct rte_mbuf *mbufs[PORTICO_TX_CHUNK];
	uint16_t stored = 0;
	if (n > PORTICO_TX_CHUNK)
		n = PORTICO_TX_CHUNK;
	uint16_t got = rte_eth_rx_burst(port, queue, mbufs, n);
	for (uint16_t i = 0; i < got; i++) {
		struct rte_mbuf *m = mbufs[i];
		if (m->nb_segs != 1) {
			rte_pktmbuf_free(m);
			(*multiseg_dropped)++;
			continue;
		}
		out[stored].mbuf = m;
		out[stored].data = rte_pktmbuf_mtod(m, uint8_t *);
		out[stored].len = m->data_len;
		out[stored].checksum_verified = rx_checksum_good(m);
		memset(out[stored].reserved, 0, sizeof(out[stored].reserved));
		stored++;
	}
	return stored;
}

uint16_t portico_tx_burst(uint16_t port, uint16_t queue, const struct portico_frame *frames,
			  uint16_t n)
{
	struct rte_mbuf *mbufs[PORTICO_TX_CHUNK];
	uint16_t sent = 0;
	while (sent < n) {
		uint16_t chunk = n - sent;
		if (chunk > PORTICO_TX_CHUNK)
			chunk = PORTICO_TX_CHUNK;
		for (uint16_t i = 0; i < chunk; i++) {
			const struct portico_frame *f = &frames[sent + i];
			struct rte_mbuf *m = f->mbuf;
			if (f->len < m->data_len) {
				m->data_len = f->len;
				m->pkt_len = f->len;
			}
			mbufs[i] = m;
		}
		uint16_t took = rte_eth_tx_burst(port, queue, mbufs, chunk);
		sent += took;
		if (took < chunk)
			break;
	}
	return sent;
}

void portico_mbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

int portico_frame_from(struct rte_mempool *pool, const uint8_t *bytes, uint16_t len,
		       struct portico_frame *out)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(pool);
	if (m == NULL)
		return -1;
	char *dst = rte_pktmbuf_append(m, len);
	if (dst == NULL) {
		rte_pktmbuf_free(m);
		return -1;
	}
	memcpy(dst, bytes, len);
	out->mbuf = m;
	out->data = (uint8_t *)dst;
	out->len = len;
	out->checksum_verified = 0;
	memset(out->reserved, 0, sizeof(out->reserved));
	return 0;
}

int portico_frame_extend(struct portico_frame *f, uint16_t len)
{
	struct rte_mbuf *m = f->mbuf;
	if (len > m->data_len) {
		if (rte_pktmbuf_append(m, (uint16_t)(len - m->data_len)) == NULL)
			return -1;
	}
	if (len > f->len)
		f->len = len;
	return 0;
}

int portico_errno(void)
{
	return rte_errno;
}

uint32_t portico_lcore_id(void)
{
	return rte_lcore_id();
}

int portico_eth_configure(uint16_t port, uint16_t nb_rx, uint16_t nb_tx, int rx_checksum)
{
	struct rte_eth_dev_info info;
	struct rte_eth_conf conf;
	int rc = rte_eth_dev_info_get(port, &info);
	if (rc != 0)
		return rc;
	memset(&conf, 0, sizeof(conf));
	if (nb_rx > 1) {
		uint64_t want = RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP;
		uint64_t hf = want & info.flow_type_rss_offloads;
		if (hf != 0) {
			conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
			conf.rx_adv_conf.rss_conf.rss_key = NULL;
			conf.rx_adv_conf.rss_conf.rss_hf = hf;
		}
	}
	if (rx_checksum) {
		uint64_t want = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM |
				RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
		conf.rxmode.offloads |= want & info.rx_offload_capa;
	}
	return rte_eth_dev_configure(port, nb_rx, nb_tx, &conf);
}

int portico_eth_dev_caps(uint16_t port, struct portico_dev_caps *out)
{
	struct rte_eth_dev_info info;
	int rc = rte_eth_dev_info_get(port, &info);
	if (rc != 0)
		return rc;
	memset(out, 0, sizeof(*out));
	out->max_rx_queues = info.max_rx_queues;
	out->max_tx_queues = info.max_tx_queues;
	out->rx_desc_max = info.rx_desc_lim.nb_max;
	out->tx_desc_max = info.tx_desc_lim.nb_max;
	out->min_mtu = info.min_mtu;
	out->max_mtu = info.max_mtu;
	out->max_rx_pktlen = info.max_rx_pktlen;
	out->flow_type_rss_offloads = info.flow_type_rss_offloads;
	out->rx_offload_capa = info.rx_offload_capa;
	if (info.driver_name != NULL)
		strncpy(out->driver_name, info.driver_name, sizeof(out->driver_name) - 1);
	return 0;
}
