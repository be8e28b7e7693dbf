package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode/utf8"
)

// The corpus: chat messages in English and Chinese with some emoji, drawn
// so that word frequencies follow Zipf's law as natural text does. The
// English vocabulary is a list of common words in rough frequency order,
// then words of chat at work, then a long tail of made-up words (so that
// rare words are as rare as in real text); Chinese text is words of a
// list in rough frequency order, with runs of characters drawn by their
// frequency between them (which makes the long tail of character pairs
// that real Chinese has).

// english are common English words, most frequent first (no word with an
// apostrophe: the tokenizer would cut it in two).
var english = strings.Fields(`the of and to a in is it you that he was for on are with as I his they be at one have this
from or had by hot word but what some we can out other were all there when up use your how said an each she which do their
time if will way about many then them write would like so these her long make thing see him two has look more day could go
come did number sound no most people my over know water than call first who may down side been now find any new work part take
get place made live where after back little only round man year came show every good me give our under name very through just
form sentence great think say help low line differ turn cause much mean before move right boy old too same tell does set three
want air well also play small end put home read hand port large spell add even land here must big high such follow act why ask
men change went light kind off need house picture try us again animal point mother world near build self earth father head
stand own page should country found answer school grow study still learn plant cover food sun four between state keep eye never
last let thought city tree cross farm hard start might story saw far sea draw left late run while press close night real life
few north open seem together next white children begin got walk example ease paper group always music those both mark often
letter until mile river car feet care second book carry took science eat room friend began idea fish mountain stop once base
hear horse cut sure watch color face wood main enough plain girl usual young ready above ever red list though feel talk bird
soon body dog family direct pose leave song measure door product black short numeral class wind question happen complete ship
area half rock order fire south problem piece told knew pass since top whole king space heard best hour better true during
hundred five remember step early hold west ground interest reach fast verb sing listen six table travel less morning ten simple
several vowel toward war lay against pattern slow center love person money serve appear road map rain rule govern pull cold
notice voice unit power town fine certain fly fall lead cry dark machine note wait plan figure star box noun field rest correct
able pound done beauty drive stood contain front teach week final gave green oh quick develop ocean warm free minute strong
special mind behind clear tail produce fact street inch multiply nothing course stay wheel full force blue object decide
surface deep moon island foot system busy test record boat common gold possible plane stead dry wonder laugh thousand ago ran
check game shape equate miss brought heat snow tire bring yes distant fill east paint language among
ok thanks please sorry meeting today tomorrow yesterday lunch coffee deploy release bug fix server database review merge
branch build issue customer report deadline monday tuesday wednesday thursday friday weekend email schedule budget design
launch shanghai beijing london berlin tokyo office team manager project client invoice contract slides demo staging
production rollback hotfix ticket sprint standup retro roadmap feature backend frontend mobile android iphone laptop
password login account dashboard metrics latency timeout outage incident postmortem oncall pager alert backup restore
migration schema index query cache cluster node gateway proxy network firewall certificate domain dns upload download
attachment photo video screenshot link document draft final approve approved signed shipped delayed blocked done
pending waiting urgent asap later soon maybe great awesome nice cool perfect agreed confirmed cancelled postponed
flight hotel taxi airport train station visa holiday vacation birthday party dinner breakfast snack pizza noodles
sushi tea beer wine gym run football weather sunny cloudy rainy windy hot freezing traffic parking`)

// chinese are common Chinese words, most frequent first.
var chinese = strings.Fields(`我们 你们 他们 今天 明天 昨天 时候 什么 没有 知道 可以 一个 这个 那个 问题 工作 现在 已经 因为 所以
但是 如果 还是 就是 大家 觉得 需要 开始 时间 事情 东西 朋友 公司 会议 项目 客户 上海 北京 深圳 广州 中国 下午 上午 晚上
早上 周末 吃饭 午饭 咖啡 谢谢 不好意思 没关系 好的 收到 马上 发布 测试 版本 服务器 数据库 文档 设计 产品 用户 功能 修复
上线 部署 计划 进度 讨论 确认 安排 报告 邮件 电话 消息 群里 看看 一下 一起 应该 可能 准备 结果 方案 预算 合同 出差 机场
酒店 高铁 天气 下雨 电脑 手机 网络 系统 代码 需求 老板 同事 团队 领导 部门 周一 周五 下周 上周 月底 年底 生日 快乐 新年
春节 假期 休息 加班 辛苦 注意 记得 检查 提交 更新 地址 价格 质量 市场 销售 数据 分析 图片 视频 链接 附件 登录 密码 账号
页面 接口 性能 延迟 故障 恢复 备份 迁移 索引 缓存 集群 节点 证书 域名 上传 下载 审批 签字 发货 延期 取消 等待 紧急 稍后
不错 完美 同意 航班 出租车 火车站 签证 生日会 晚饭 早饭 面条 火锅 奶茶 啤酒 健身 跑步 足球 晴天 多云 大风 堵车 停车 杭州
成都 南京 武汉 西安 香港 台北 新加坡 伦敦 东京 纽约 老师 学生 学校 考试 作业 孩子 父母 医院 医生 感冒 发烧 药店 超市
外卖 快递 包裹 银行 工资 报销 发票 会议室 投影仪 白板 周报 月报 年会 团建 面试 简历 入职 离职 培训 流程 规范 标准 目标`)

// hanzi are common Chinese characters, most frequent first: the runs
// between words are drawn from them.
var hanzi = []rune(`的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从知全点明实因动本意部理开高长现新把力正想相手问样月最体她被水间利美外第位少回给电特感路加色程话总系总把工通`)

// emoji are the symbols some messages carry.
var emoji = []string{"😀", "😂", "👍", "🎉", "❤", "🔥", "🙏", "😅", "🤔", "👀", "✅", "🚀", "😊", "💯", "☕", "🍜"}

// corpus draws message bodies. Its vocabulary is fixed by the lists above
// and tail words made up from seed 1, so every run with the same --seed
// writes the same messages.
type corpus struct {
	r       *rand.Rand
	words   []string // English: the lists, then the tail
	enZipf  *rand.Zipf
	zhZipf  *rand.Zipf
	hanZipf *rand.Zipf
}

// tailWords is how many made-up English words follow the listed ones.
const tailWords = 30000

func newCorpus(seed uint64) *corpus {
	words := dedupe(english)
	made := map[string]bool{}
	for _, w := range words {
		made[w] = true
	}
	tr := rand.New(rand.NewPCG(1, 1))
	for len(words) < len(english)+tailWords {
		w := madeUpWord(tr)
		if !made[w] {
			made[w] = true
			words = append(words, w)
		}
	}
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	return &corpus{
		r: r, words: words,
		enZipf:  rand.NewZipf(r, 1.07, 2, uint64(len(words)-1)),
		zhZipf:  rand.NewZipf(r, 1.1, 2, uint64(len(chinese)-1)),
		hanZipf: rand.NewZipf(r, 1.05, 4, uint64(len(hanzi)-1)),
	}
}

func dedupe(ws []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, w := range ws {
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

// madeUpWord is a pronounceable word of 2–4 syllables.
func madeUpWord(r *rand.Rand) string {
	const onsets, vowels, codas = "bcdfghjklmnprstvwz", "aeiou", "nrstlm"
	var b strings.Builder
	for range 2 + r.IntN(3) {
		b.WriteByte(onsets[r.IntN(len(onsets))])
		b.WriteByte(vowels[r.IntN(len(vowels))])
		if r.IntN(3) == 0 {
			b.WriteByte(codas[r.IntN(len(codas))])
		}
	}
	return b.String()
}

// body returns one message: 65 % English, 25 % Chinese, 10 % mixed; one
// in eight carries emoji.
func (c *corpus) body() string {
	var s string
	switch p := c.r.IntN(100); {
	case p < 65:
		s = c.englishSentence(3 + c.length(9))
	case p < 90:
		s = c.chineseSentence()
	default:
		s = c.mixed()
	}
	if c.r.IntN(8) == 0 {
		n := 1 + c.r.IntN(2)
		for range n {
			e := emoji[c.r.IntN(len(emoji))]
			if c.r.IntN(2) == 0 {
				s += " " + e
			} else {
				s = e + " " + s
			}
		}
	}
	if utf8.RuneCountInString(s) > 4000 {
		s = string([]rune(s)[:4000])
	}
	return s
}

// length is a skewed length: mostly short, sometimes long (mean about mean).
func (c *corpus) length(mean int) int {
	return int(c.r.ExpFloat64() * float64(mean))
}

func (c *corpus) englishWord() string { return c.words[c.enZipf.Uint64()] }

func (c *corpus) englishSentence(n int) string {
	var b strings.Builder
	for i := range n {
		w := c.englishWord()
		if i == 0 && w != "" {
			w = strings.ToUpper(w[:1]) + w[1:]
		} else {
			b.WriteByte(' ')
		}
		b.WriteString(w)
		if i > 2 && i < n-1 && c.r.IntN(12) == 0 {
			b.WriteByte(',')
		}
	}
	b.WriteString([]string{".", ".", ".", "?", "!", ""}[c.r.IntN(6)])
	return b.String()
}

func (c *corpus) chineseClause() string {
	var b strings.Builder
	for range 2 + c.r.IntN(5) {
		if c.r.IntN(10) < 6 {
			b.WriteString(chinese[c.zhZipf.Uint64()])
		} else {
			for range 1 + c.r.IntN(2) {
				b.WriteRune(hanzi[c.hanZipf.Uint64()])
			}
		}
	}
	return b.String()
}

func (c *corpus) chineseSentence() string {
	var b strings.Builder
	n := 1 + c.r.IntN(3)
	for i := range n {
		if i > 0 {
			b.WriteString("，")
		}
		b.WriteString(c.chineseClause())
	}
	b.WriteString([]string{"。", "。", "？", "！", ""}[c.r.IntN(5)])
	return b.String()
}

// mixed is Chinese with English words in it, or the other way round, as
// people write at work ("明天的meeting改到3点").
func (c *corpus) mixed() string {
	if c.r.IntN(2) == 0 {
		return c.chineseClause() + c.englishWord() + c.chineseClause() + fmt.Sprintf("%d点", 1+c.r.IntN(12)) + "。"
	}
	return c.englishSentence(2+c.length(4)) + " " + chinese[c.zhZipf.Uint64()] + " " + c.englishSentence(2+c.length(3))
}
